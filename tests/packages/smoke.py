"""Smoke test of an installed liblb wheel or sdist (tests/packages/README.md)."""

import os
import sys

import liblb

# Imported from the venv, never from the repository's python/ folder.
assert "site-packages" in liblb.__file__, liblb.__file__
assert not liblb.__file__.startswith(os.environ["LIBLB_REPO"] + "/"), liblb.__file__
assert liblb.__version__ == os.environ["LIBLB_EXPECT_VERSION"], liblb.__version__

ring = liblb.Balancer("ring", ["NodeA", "NodeB", "NodeC"], vnodes=3)
got = [ring.pick(k) for k in ("Key1", "Key2", "Key3")]
assert got == ["NodeB", "NodeA", "NodeC"], got

wrr = liblb.Balancer("weighted_round_robin", [("a", 5), ("b", 1), ("c", 1)])
seq = "".join(wrr.pick() for _ in range(7))
assert seq == "aabacaa", seq

try:
    ring.remove("nope")
except liblb.UnknownNodeError as e:
    assert e.code == "LB_UNKNOWN_NODE", e.code
else:
    raise AssertionError("removing an unknown node did not raise")
assert ring.pick("Key1") == "NodeB"
assert liblb.parse_orca("TEXT named_metrics.rif:3").named_metrics == {"rif": 3.0}

# Server-reported load: a ServerLoad backend's header, read back; client_side_wrr weighs by
# reports (0.9 and 0.3 utilisation at 100 qps: 1:3).
server = liblb.ServerLoad()
server.set_application_utilization(0.3)
with server.start():
    pass
assert liblb.parse_orca(server.header()).application_utilization == 0.3
weighed = liblb.Balancer("client_side_wrr", ["a", "b"], blackout_period_ms=0)
weighed.report_load("a", "TEXT application_utilization=0.9,rps_fractional=100")
weighed.report_load("b", "TEXT application_utilization=0.3,rps_fractional=100")
assert sorted(weighed.pick() for _ in range(4)) == ["a", "b", "b", "b"]

print(f"python {sys.version.split()[0]}: liblb {liblb.__version__} from {liblb.__file__}: ring {got}, wrr {seq}")
