"""The Cython core: RecordBatch v2 codec, CRC32C and (later) index search. Built by setup.py."""
