"""kafka-features (KIP-584 feature versioning): `describe` lists the features the newest Kafka
release's tools know with each node's supported range and the cluster's finalized level, read
from ApiVersions; `upgrade` to the finalized level succeeds without a change, and an update no
node can run, or of a feature nobody knows, is refused with Kafka's words and changes nothing."""
import re

from conftest import run_tool

# What Kafka 4.x's tools know; each must be listed (evenkeel: at level 0 where it does not
# serve the feature yet).
FEATURES = {"metadata.version", "kraft.version", "group.version", "transaction.version"}
LINE = re.compile(r"Feature: (\S+)\s+SupportedMinVersion: (\S+)\s+SupportedMaxVersion: (\S+)\s+"
                  r"FinalizedVersionLevel: (\S+)\s+Epoch: (\S+)")


def features(bootstrap, *args):
    rc, out, err = run_tool("kafka-features", "--bootstrap-server", bootstrap, *args)
    return rc, out + err


def describe(bootstrap):
    rc, out = features(bootstrap, "describe")
    assert rc == 0, "kafka-features describe failed (rc=%s): %s" % (rc, out)
    found = {}
    for m in LINE.finditer(out):
        name, lo, hi, level, epoch = m.groups()
        found[name] = {"min": lo, "max": hi, "level": level, "epoch": epoch}
    return found


def level_number(text):
    """A level as the tool prints it: a number, or a metadata.version like 4.1-IV1."""
    return int(text) if text.isdigit() else text


def test_describe_lists_every_feature_and_finalizes_metadata_version(bootstrap):
    found = describe(bootstrap)
    assert FEATURES <= set(found), found
    mv = found["metadata.version"]
    assert re.fullmatch(r"\d+\.\d+-IV\d+", mv["level"]), mv
    # A new cluster runs the newest metadata.version its nodes support.
    assert mv["level"] == mv["max"], mv
    epochs = {f["epoch"] for f in found.values()}
    assert len(epochs) == 1 and int(epochs.pop()) >= 0, found
    for name, f in found.items():
        if name == "metadata.version":
            continue
        lo, hi, level = (level_number(f[k]) for k in ("min", "max", "level"))
        assert 0 <= lo <= hi and 0 <= level <= hi, (name, f)


def test_an_upgrade_to_the_finalized_level_changes_nothing(bootstrap):
    before = describe(bootstrap)
    level = before["metadata.version"]["level"]
    rc, out = features(bootstrap, "upgrade", "--metadata", level)
    assert rc == 0, out
    assert "metadata.version was upgraded to" in out, out
    after = describe(bootstrap)
    assert {n: f["level"] for n, f in after.items()} == {n: f["level"] for n, f in before.items()}


def test_levels_no_node_runs_and_unknown_features_are_refused(bootstrap):
    before = describe(bootstrap)
    too_high = int(before["group.version"]["max"]) + 5
    rc, out = features(bootstrap, "upgrade", "--feature", "group.version=%d" % too_high)
    assert rc != 0, out
    assert "Invalid update version %d for feature group.version" % too_high in out, out
    assert "only supports versions" in out, out
    rc, out = features(bootstrap, "upgrade", "--feature", "no.such.feature=1")
    assert rc != 0, out
    assert "does not support this feature" in out, out
    # One refused update refuses the whole request: the valid one beside it is not applied.
    rc, out = features(bootstrap, "upgrade", "--feature", "group.version=%d" % too_high,
                       "--metadata", before["metadata.version"]["level"])
    assert rc != 0, out
    assert "The update failed for all features" in out, out
    assert describe(bootstrap)["metadata.version"]["level"] == before["metadata.version"]["level"]

