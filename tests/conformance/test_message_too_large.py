import pytest
from kafka.errors import MessageSizeTooLargeError

from kclient import producer, read_all


def test_record_over_max_message_bytes_rejected(bootstrap, topic_name, make_topic):
    make_topic(topic_name, 1, configs=["max.message.bytes=10000"])
    p = producer(bootstrap, max_request_size=1000000, retries=0)
    try:
        with pytest.raises(MessageSizeTooLargeError):
            p.send(topic_name, value=b"x" * 20000, partition=0).get(timeout=20)
        md = p.send(topic_name, value=b"small", partition=0).get(timeout=20)
        assert md.offset == 0
    finally:
        p.close()
    recs = read_all(bootstrap, topic_name, [0], 1)
    assert [(r.offset, r.value) for r in recs] == [(0, b"small")]
