"""`kafkalog dump-log`: print segment files the way Kafka's DumpLogSegments does, or as JSON lines.

JSON lines use the field names and meanings of the Kafka-written vectors' `expected.jsonl`
(segment / batch / record, offsetIndex / offsetIndexEntry, timeIndex / timeIndexEntry,
txnIndex / abortedTxn, producerSnapshot / producerSnapshotEntry, leaderEpochCheckpoint /
epochEntry), so the two compare field by field. Text follows kafka-dump-log's field names and
order. Index verification reports every entry that does not point where Kafka guarantees it
points; the exit code is non-zero when anything is corrupt or mismatched. `--transaction-log-decoder` prints the
records of `__transaction_state` segments as Kafka's decoder does (`key: transaction_metadata::transactionalId=...
payload: producerId:...,state=...`).
Reads files only; never modifies them.
"""
from __future__ import annotations

import base64
import json
import os
import sys
from typing import TextIO

from engine.common.errors import KafkaError
from engine.record import records as reference
from engine.record.batch_format import CONTROL_TYPE_NAMES, increment_sequence
from engine.tools.output import progress
from engine.segments import leader_epoch_checkpoint, names
from engine.segments.fs import FileSystem
from engine.segments.offset_index import OffsetIndex
from engine.segments.time_index import TimeIndex
from engine.segments.txn_index import TxnIndex
from engine.log import producer_snapshot
from engine.txn import transaction_log

TS_TYPE = {"create": "CreateTime", "log_append": "LogAppendTime"}


def _text(raw: bytes | None) -> str | None:
    """UTF-8 text when printable (tab, LF, CR allowed), else None."""
    if raw is None:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if any(ord(c) < 32 and c not in "\t\n\r" or ord(c) == 127 for c in text) else text


def _b64(raw: bytes | None) -> str | None:
    return None if raw is None else base64.b64encode(raw).decode()


def _field(name: str, raw: bytes | None) -> dict:
    return {name: _text(raw), name + "B64": _b64(raw), name + "Size": -1 if raw is None else len(raw)}


def record_json(key: bytes | None, value: bytes | None, headers) -> dict:
    """A record's key, value and headers as JSON fields: text when printable, base64 and size always."""
    return {**_field("key", key), **_field("value", value),
            "headers": [{"key": k, **_field("value", v)} for k, v in headers]}


class Dumper:
    def __init__(self, out: TextIO, *, as_json: bool, deep: bool, print_data: bool,
                 transaction_log_decoder: bool = False) -> None:
        self.out, self.as_json, self.deep, self.print_data = out, as_json, deep, print_data
        self.txn_decoder = transaction_log_decoder
        self.problems = 0
        self.fs = FileSystem()

    def emit(self, obj: dict | None = None, text: str | None = None) -> None:
        if self.as_json and obj is not None:
            self.out.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n")
        elif not self.as_json and text is not None:
            self.out.write(text + "\n")

    def problem(self, message: str) -> None:
        self.problems += 1
        self.emit({"type": "problem", "message": message}, message)

    # --- .log ---------------------------------------------------------------------------------
    def dump_log(self, path: str, base: int) -> None:
        with open(path, "rb") as f:
            data = f.read()
        name = os.path.basename(path)
        self.emit({"type": "segment", "file": name, "baseOffset": base, "sizeInBytes": len(data)},
                  f"Dumping {path}\nLog starting offset: {base}")
        end = 0
        try:
            for batch in reference.iter_batches(data, source=path):
                self._dump_batch(batch)
                end = batch.position + batch.size_in_bytes
        except KafkaError as exc:
            self.problem(f"Found corrupt data in {name}: {exc}")
            return
        if end < len(data):  # a torn tail (Kafka's tool reports it in these words)
            self.problem(f"Found {len(data) - end} invalid bytes at the end of {name}")

    def _dump_batch(self, b) -> None:
        crc = b.compute_crc()
        valid = b.is_valid()
        if not valid:
            self.problems += 1
        line = {
            "type": "batch", "position": b.position, "baseOffset": b.base_offset, "lastOffset": b.last_offset,
            "count": b.records_count, "sizeInBytes": b.size_in_bytes, "magic": b.magic, "crc": b.crc,
            "crcComputed": crc, "attributes": b.attributes,
            "attributesDecoded": {"compression": b.compression, "timestampType": TS_TYPE[b.timestamp_type],
                                  "isTransactional": b.is_transactional, "isControl": b.is_control,
                                  "hasDeleteHorizonMs": b.has_delete_horizon},
            "batchLength": b.batch_length, "lastOffsetDelta": b.last_offset_delta,
            "baseTimestamp": b.base_timestamp, "crcValid": valid, "compression": b.compression,
            "timestampType": TS_TYPE[b.timestamp_type], "maxTimestamp": b.max_timestamp,
            "producerId": b.producer_id, "producerEpoch": b.producer_epoch, "baseSequence": b.base_sequence,
            "lastSequence": b.last_sequence, "partitionLeaderEpoch": b.partition_leader_epoch,
            "isTransactional": b.is_transactional, "isControl": b.is_control,
        }
        if b.has_delete_horizon:
            line["deleteHorizonMs"] = b.delete_horizon_ms
        horizon = f"OptionalLong[{b.delete_horizon_ms}]" if b.has_delete_horizon else "OptionalLong.empty"
        self.emit(line, (
            f"baseOffset: {b.base_offset} lastOffset: {b.last_offset} count: {b.records_count} "
            f"baseSequence: {b.base_sequence} lastSequence: {b.last_sequence} producerId: {b.producer_id} "
            f"producerEpoch: {b.producer_epoch} partitionLeaderEpoch: {b.partition_leader_epoch} "
            f"isTransactional: {str(b.is_transactional).lower()} isControl: {str(b.is_control).lower()} "
            f"deleteHorizonMs: {horizon} position: {b.position} {TS_TYPE[b.timestamp_type]}: {b.max_timestamp} "
            f"size: {b.size_in_bytes} magic: {b.magic} compresscodec: {b.compression} crc: {b.crc} "
            f"isvalid: {str(valid).lower()}"))
        if not (self.as_json or self.deep or self.print_data):
            return

        def record(offset, ts, key, value, headers, ctype, epoch, stored, size):
            seq = increment_sequence(b.base_sequence, offset - b.base_offset)
            rec = {"type": "record", "offset": offset, "timestamp": ts}
            if b.timestamp_type == "log_append":
                rec["storedTimestamp"] = stored
            rec.update({"sequence": seq, "sizeInBytes": size, **record_json(key, value, headers)})
            text = (f"| offset: {offset} {TS_TYPE[b.timestamp_type]}: {ts} keySize: {-1 if key is None else len(key)} "
                    f"valueSize: {-1 if value is None else len(value)} sequence: {seq} "
                    f"headerKeys: [{','.join(k for k, _ in headers)}]")
            if ctype is not None:
                rec["control"] = {"controlType": CONTROL_TYPE_NAMES.get(ctype, "UNKNOWN"), "controlTypeId": ctype,
                                  "coordinatorEpoch": epoch}
                if ctype in (0, 1):
                    text += f" endTxnMarker: {CONTROL_TYPE_NAMES[ctype]} coordinatorEpoch: {epoch}"
            elif self.txn_decoder:
                decoded = _transaction_log_text(key, value)
                rec["transactionLog"] = dict(zip(("key", "payload"), decoded))
                text += f" key: {decoded[0]} payload: {decoded[1]}"
            elif self.print_data:
                if key is not None:
                    text += f" key: {key.decode('utf-8', 'replace')}"
                if value is not None:
                    text += f" payload: {value.decode('utf-8', 'replace')}"
            self.emit(rec, text)

        try:
            b.walk(record)
        except KafkaError as exc:
            self.problem(f"Found corrupt records in the batch at position {b.position}: {exc}")

    # --- indexes --------------------------------------------------------------------------------
    def _batches_by_position(self, log_path: str) -> dict[int, object]:
        if not os.path.exists(log_path):
            return {}
        with open(log_path, "rb") as f:
            data = f.read()
        try:
            return {b.position: b for b in reference.iter_batches(data)}
        except KafkaError:
            return {}

    def read_more(self, log_path: str) -> bool:
        """Add the batches appended to `log_path` since its batches were read; whether there were any. The dump reads
        a log once (it reports the files as they were when it read them): none."""
        return False

    def unwritten_here(self, log_path: str) -> bool:
        """Whether the index of `log_path` may have entries not yet written after the last one that is (a live
        engine's active segment: it writes them 64 at a time): its entries then end at its last bytes that are not
        zero. The dump shows the files as they are: no."""
        return False

    def dump_offset_index(self, path: str, base: int, sanity: bool) -> None:
        def check(i, batches, offset, position):
            batch = batches.get(position)
            last = batch.last_offset if batch is not None else None
            entry = {"type": "offsetIndexEntry", "i": i, "offset": offset, "relativeOffset": offset - base,
                     "position": position, "batchLastOffsetAtPosition": last, "matchesLog": last == offset}
            return offset, last, (entry, f"offset: {offset} position: {position}",
                                  f"Index offset {offset} at position {position} does not match the log "
                                  f"(batch last offset {last})")

        self._dump_index(OffsetIndex, "offsetIndex", names.INDEX, path, base, sanity, check,
                         lambda i, offset, position: offset == base and i > 0,
                         lambda offset, prev: f"Index offset {offset} does not follow {prev}", None)

    def dump_time_index(self, path: str, base: int, sanity: bool) -> None:
        by_last: dict = {}

        def check(i, batches, ts, offset):
            if len(by_last) != len(batches):  # (first, and after batches were added to a live log's)
                by_last.update((b.last_offset, b) for b in batches.values())
            batch_max = by_last[offset].max_timestamp if offset in by_last else None
            entry = {"type": "timeIndexEntry", "i": i, "timestamp": ts, "offset": offset,
                     "relativeOffset": offset - base, "batchMaxTimestampAtOffset": batch_max}
            return ts, batch_max, (entry, f"timestamp: {ts} offset: {offset}",
                                   f"Time index timestamp {ts} at offset {offset} does not match the log "
                                   f"(batch max timestamp {batch_max})")

        self._dump_index(TimeIndex, "timeIndex", names.TIME_INDEX, path, base, sanity, check,
                         lambda i, ts, offset: ts == 0 and offset == base and i > 0,
                         lambda ts, prev: f"Time index timestamp {ts} does not grow (after {prev})", -1)

    def _dump_index(self, kind, label: str, suffix: str, path: str, base: int, sanity: bool, check, is_padding,
                    not_growing, prev) -> None:
        """Dump an offset or time index: `check` gives each entry's key, what the log says it should be, and
        what to print; keys must grow from `prev`; a zero-filled preallocated tail (`is_padding`) ends them."""
        log_path = path[:-len(suffix)] + names.LOG
        index = kind(self.fs, path, base, os.path.getsize(path), writable=False)
        if self.unwritten_here(log_path):  # (the entries after the last one written are not entries yet)
            with open(path, "rb") as f:
                index.entries = min(index.entries, -(-len(f.read().rstrip(b"\0")) // index.entry_size))
        try:
            batches = self._batches_by_position(log_path)
            self.emit({"type": label, "file": os.path.basename(path), "baseOffset": base,
                       "fileBytes": os.path.getsize(path), "entries": index.entries},
                      f"Dumping {path}")
            if sanity:
                self._sanity(index)
            for i in range(index.entries):
                fields = index.entry(i)
                if is_padding(i, *fields):
                    break
                key, in_log, (entry, text, mismatch) = check(i, batches, *fields)
                if in_log != key and self.read_more(log_path):  # (the entry's batch came after the log was read)
                    key, in_log, (entry, text, mismatch) = check(i, batches, *fields)
                self.emit(entry, text)
                if in_log != key:
                    self.problem(mismatch)
                if prev is not None and key <= prev:
                    self.problem(not_growing(key, prev))
                prev = key
        finally:
            index.close()

    def _sanity(self, index) -> None:
        try:
            index.sanity_check()
        except KafkaError as exc:
            self.problem(f"Index sanity check failed: {exc}")

    def dump_txn_index(self, path: str, base: int) -> None:
        self.emit({"type": "txnIndex", "file": os.path.basename(path), "fileBytes": os.path.getsize(path)},
                  f"Dumping {path}")
        for t in TxnIndex(self.fs, path, base).all():
            self.emit({"type": "abortedTxn", "version": 0, "producerId": t.producer_id, "firstOffset": t.first_offset,
                       "lastOffset": t.last_offset, "lastStableOffset": t.last_stable_offset},
                      f"version: 0 producerId: {t.producer_id} firstOffset: {t.first_offset} "
                      f"lastOffset: {t.last_offset} lastStableOffset: {t.last_stable_offset}")

    def dump_snapshot(self, path: str) -> None:
        self.emit({"type": "producerSnapshot", "file": os.path.basename(path)}, f"Dumping {path}")
        with open(path, "rb") as f:
            entries = producer_snapshot.decode(f.read(), path)
        for e in entries:
            line = {"type": "producerSnapshotEntry", "producerId": e.producer_id, "producerEpoch": e.producer_epoch,
                    "coordinatorEpoch": e.coordinator_epoch, "lastTimestamp": e.timestamp,
                    "firstSequence": e.first_sequence, "lastSequence": e.last_sequence, "lastDataOffset": e.last_offset}
            if e.current_txn_first_offset >= 0:
                line["currentTxnFirstOffset"] = e.current_txn_first_offset
            self.emit(line, f"producerId: {e.producer_id} producerEpoch: {e.producer_epoch} "
                            f"coordinatorEpoch: {e.coordinator_epoch} currentTxnFirstOffset: "
                            f"{e.current_txn_first_offset if e.current_txn_first_offset >= 0 else 'None'} "
                            f"lastTimestamp: {e.timestamp} firstSequence: {e.first_sequence} "
                            f"lastSequence: {e.last_sequence} lastOffset: {e.last_offset}")

    def dump_epochs(self, path: str) -> None:
        self.emit({"type": "leaderEpochCheckpoint", "file": os.path.basename(path)}, f"Dumping {path}")
        with open(path, "rb") as f:
            for epoch, start in leader_epoch_checkpoint.parse(f.read(), path):
                self.emit({"type": "epochEntry", "epoch": epoch, "startOffset": start},
                          f"epoch: {epoch} startOffset: {start}")


def _transaction_log_text(key: bytes | None, value: bytes | None) -> tuple[str, str | None]:
    """Kafka's TransactionLog.formatRecordKeyAndValue text of a `__transaction_state` record."""
    version = int.from_bytes(key[:2], "big", signed=True) if key and len(key) >= 2 else None
    if version != transaction_log.KEY_VERSION:
        return f"unknown::version={version}", None
    try:
        tid = transaction_log.decode_key(key)
        return (f"transaction_metadata::transactionalId={tid}",
                transaction_log.describe_value(None if value is None else transaction_log.decode_value(value)))
    except KafkaError as exc:
        return f"transaction_metadata::undecodable ({exc})", None


def dump(files: list[str], *, as_json: bool = False, deep: bool = False, print_data: bool = False,
         verify_index_only: bool = False, index_sanity_check: bool = False, out: TextIO = sys.stdout,
         base_offset: int | None = None, transaction_log_decoder: bool = False) -> int:
    """Dump each file; return the exit code (1 if any corruption or index mismatch was found)."""
    decode = print_data or transaction_log_decoder
    d = Dumper(out, as_json=as_json, deep=deep or decode, print_data=decode,
               transaction_log_decoder=transaction_log_decoder)
    for path in progress(files, total=len(files), desc="dump-log"):
        name = os.path.basename(path)
        try:
            base = base_offset if base_offset is not None else (
                names.offset_from_file_name(name) if name[:1].isdigit() else 0)
            if name.endswith(names.LOG):
                if not verify_index_only:
                    d.dump_log(path, base)
            elif name.endswith(names.INDEX):
                d.dump_offset_index(path, base, index_sanity_check)
            elif name.endswith(names.TIME_INDEX):
                d.dump_time_index(path, base, index_sanity_check)
            elif name.endswith(names.TXN_INDEX):
                d.dump_txn_index(path, base)
            elif name.endswith(names.SNAPSHOT):
                d.dump_snapshot(path)
            elif name == leader_epoch_checkpoint.FILE:
                d.dump_epochs(path)
            else:
                d.problem(f"Ignoring unknown file {path}")
        except (KafkaError, OSError, ValueError) as exc:
            d.problem(f"Cannot dump {path}: {exc}")
    return 1 if d.problems else 0
