"""adopt_state: a stand-in that takes over a built object's attributes keeps them alive on its own."""
import gc

from engine.common.shared_state import adopt_state


class _Child:
    def __init__(self, owner: object) -> None:
        self.value, self.owner = 7, owner


class _Built:
    def __init__(self) -> None:
        self.child = _Child(self)  # a cycle, as a log's appenders make: only the collector frees it


def _adopted() -> _Built:
    stand_in = _Built.__new__(_Built)
    stand_in.__dict__ = {"pending": True}
    adopt_state(stand_in, _Built())
    return stand_in


def test_a_stand_in_keeps_the_built_objects_attributes_through_a_collection():
    stand_in = _adopted()  # the built object is now reachable only through the shared attributes
    gc.collect()
    assert "pending" not in vars(stand_in)
    assert stand_in.child.value == 7 and vars(stand_in.child.owner) is vars(stand_in)


def test_writes_through_either_object_are_seen_by_the_other():
    stand_in = _adopted()
    built = stand_in.child.owner
    built.later = 1
    stand_in.child = None
    assert stand_in.later == 1 and built.child is None
