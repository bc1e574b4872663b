"""Java's default partitioner for keyed records, ported to Python (shared by the client
drivers: kafka-python's default partitioner, and librdkafka's (confluent-kafka, kcat) with
partitioner=murmur2_random)."""


def murmur2(data: bytes) -> int:
    """Java's org.apache.kafka.common.utils.Utils.murmur2, as a signed 32-bit int."""
    length = len(data)
    seed = 0x9747B28C
    m = 0x5BD1E995
    r = 24
    h = (seed ^ length) & 0xFFFFFFFF
    length4 = length // 4
    for i in range(length4):
        i4 = i * 4
        k = (data[i4] & 0xFF) | ((data[i4 + 1] & 0xFF) << 8) | \
            ((data[i4 + 2] & 0xFF) << 16) | ((data[i4 + 3] & 0xFF) << 24)
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    rem = length % 4
    base = length & ~3
    if rem == 3:
        h ^= (data[base + 2] & 0xFF) << 16
    if rem >= 2:
        h ^= (data[base + 1] & 0xFF) << 8
    if rem >= 1:
        h ^= data[base] & 0xFF
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def java_partition(key: bytes, partitions: int) -> int:
    # Utils.toPositive(Utils.murmur2(key)) % numPartitions
    return (murmur2(key) & 0x7FFFFFFF) % partitions
