"""Consumer groups' state: committed offsets in `__consumer_offsets` (the group coordinator builds on it)."""
