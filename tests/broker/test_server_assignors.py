"""`make interop`: the consumer group protocol's server assignors (engine.groups.server_assignors) against Kafka's own
classes (KAFKA_HOME's UniformAssignor and RangeAssignor) on random group histories: members join (some static), leave,
come back under a new member id with their instance id, change subscriptions; topics appear and grow. At every step
both sides assign the same group from the same previous target assignment, and must agree exactly (Kafka's classes
are run in this module's orders: tests/broker/java/KafkaServerAssignors.java says how). Not part of `make test` (it
needs a Kafka build)."""
from __future__ import annotations

import base64
import json
import os
import random
import subprocess
import uuid

import pytest

from engine.groups.server_assignors import GroupSpec, MemberSpec, RangeAssignor, UniformAssignor
from tests.broker.checkpoint_corpus import kafka_java

HISTORIES = int(os.environ.get("KAFKALOG_ASSIGNOR_HISTORIES", "300"))
STEPS = 25


@pytest.fixture(scope="module")
def kafka_assign(tmp_path_factory):
    command = kafka_java(tmp_path_factory, "KafkaServerAssignors")

    def assign(groups: list[dict]) -> list[dict]:
        done = subprocess.run(command, input="".join(json.dumps(g) + "\n" for g in groups), capture_output=True, text=True,
                              check=True)
        return [json.loads(line) for line in done.stdout.splitlines()]
    return assign


class _History:
    """A group changing at random; `spec(assignor)` is its present shape with that assignor's last assignment."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.topics: dict[str, int] = {}
        self.members: dict[str, tuple[str | None, frozenset[str]]] = {}
        self.targets: dict[str, dict[str, dict]] = {"uniform": {}, "range": {}}
        self.serial = 0
        for _ in range(rng.randint(1, 4)):
            self._new_topic()

    def _new_topic(self) -> None:
        raw = uuid.UUID(int=self.rng.getrandbits(128)).bytes
        self.topics[base64.urlsafe_b64encode(raw).decode().rstrip("=")] = self.rng.randint(0, 16)

    def _subscription(self) -> frozenset[str]:
        others = [s for _, s in self.members.values()]
        if others and self.rng.random() < 0.6:
            return self.rng.choice(others)  # alike subscriptions keep many steps homogeneous
        return frozenset(self.rng.sample(list(self.topics), self.rng.randint(1, len(self.topics))))

    def step(self) -> None:
        r = self.rng.random()
        if r < 0.35 or not self.members:
            self.serial += 1
            instance = f"i{self.serial}" if self.rng.random() < 0.3 else None
            self.members[f"m{self.rng.getrandbits(32):08x}"] = (instance, self._subscription())
        elif r < 0.5:
            gone = self.rng.choice(list(self.members))
            del self.members[gone]
            for t in self.targets.values():
                t.pop(gone, None)
        elif r < 0.6:
            static = [m for m, (i, _) in self.members.items() if i is not None]
            if static:  # a static member back under a new member id takes over its target assignment, last in order
                old = self.rng.choice(static)
                new = f"m{self.rng.getrandbits(32):08x}"
                self.members[new] = self.members.pop(old)
                for t in self.targets.values():
                    t[new] = t.pop(old, {})
        elif r < 0.75:
            m = self.rng.choice(list(self.members))
            self.members[m] = (self.members[m][0], self._subscription())
        elif r < 0.85 and len(self.topics) < 8:
            self._new_topic()
        else:
            t = self.rng.choice(list(self.topics))
            self.topics[t] += self.rng.randint(1, 5)

    def spec(self, assignor: str) -> GroupSpec:
        target = self.targets[assignor]
        subs = {s for _, s in self.members.values()}
        return GroupSpec({m: MemberSpec(s, target.get(m, {}), i) for m, (i, s) in self.members.items()},
                         {t: n for t, n in self.topics.items() if any(t in s for s in subs)}, len(subs) == 1)


def _as_json(assignor: str, spec: GroupSpec) -> dict:
    return {"assignor": assignor, "homogeneous": spec.homogeneous, "topics": spec.partitions,
            "members": [{"id": m, "instance": s.instance_id, "topics": sorted(s.topics),
                         "assignment": {t: sorted(ps) for t, ps in s.assignment.items()}}
                        for m, s in spec.members.items()]}


def _plain(assignment: dict) -> dict:
    return {m: {t: sorted(ps) for t, ps in a.items() if ps} for m, a in assignment.items() if any(a.values())}


def test_the_server_assignors_agree_with_kafkas_on_random_group_histories(kafka_assign):
    ours = {"uniform": UniformAssignor(), "range": RangeAssignor()}
    rng = random.Random(int(os.environ.get("KAFKALOG_ASSIGNOR_SEED", "848")))
    histories = [_History(random.Random(rng.getrandbits(64))) for _ in range(HISTORIES)]
    compared, kinds = 0, set()
    for _ in range(STEPS):
        groups, mine = [], []
        for h in histories:
            h.step()
            for name, assignor in ours.items():
                spec = h.spec(name)
                result = assignor.assign(spec)
                groups.append(_as_json(name, spec))
                mine.append((h, name, spec, result))
        for (h, name, spec, result), theirs in zip(mine, kafka_assign(groups)):
            assert "error" not in theirs, theirs
            assert _plain(result) == _plain(theirs), (name, _as_json(name, spec), theirs)
            h.targets[name] = {m: dict(a) for m, a in result.items()}
            kinds.add((name, spec.homogeneous, any(s.instance_id for s in spec.members.values())))
            compared += 1
    assert compared == HISTORIES * STEPS * 2
    # both assignors met both kinds of group, with and without static members
    assert {(a, h) for a, h, _ in kinds} == {(a, h) for a in ours for h in (True, False)}
    assert {s for _, _, s in kinds} == {True, False}
