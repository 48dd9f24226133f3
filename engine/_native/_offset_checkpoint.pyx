# cython: language_level=3
"""The reader of Kafka's offset checkpoint files (`recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`,
`replication-offset-checkpoint`, `cleaner-offset-checkpoint`): the twin of segments.offset_checkpoint's Python
parser, giving the same entries or the same refusal (KafkaStorageError, same message) for every input. The format and
Kafka's rules are in the docstrings of segments.checkpoint_file and segments.offset_checkpoint.
One pass over the bytes: lines are cut at '\\r\\n', '\\r' or '\\n', an entry's fields at runs of ' ', '\\t', '\\v' and
'\\f' (UTF-8 never puts those bytes inside a character, so cutting the bytes cuts the text the same way), and an
ASCII number is read digit by digit with Java's range checks. A number field holding other characters is read by
the Python rule (Java and Python both take any Unicode decimal digit). A topic name is made once for each run of
lines that repeat it, so a file of 100,000 partitions of one topic holds one name.
Crash policy: none (pure parsing). Thread-safety: a pure function of its arguments.
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_SetItem
from libc.stdint cimport uint64_t
from libc.string cimport memcmp

from engine.common.errors import KafkaStorageError

cdef int VERSION = 0
cdef uint64_t INT32_MAX = 0x7FFFFFFF
cdef uint64_t INT64_MAX = 0x7FFFFFFFFFFFFFFF


cdef inline bint _space(unsigned char c) nogil:
    return c == 32 or c == 9 or c == 11 or c == 12


cdef inline Py_ssize_t _line_end(const unsigned char *p, Py_ssize_t at, Py_ssize_t n) nogil:
    while at < n and p[at] != 10 and p[at] != 13:
        at += 1
    return at


cdef inline Py_ssize_t _next_line(const unsigned char *p, Py_ssize_t end, Py_ssize_t n) nogil:
    """Where the line after the one ending at `end` starts (past its '\\r\\n', '\\r' or '\\n'), n when none."""
    if end >= n:
        return n
    if p[end] == 13 and end + 1 < n and p[end + 1] == 10:
        return end + 2
    return end + 1


cdef str _text(const unsigned char *p, Py_ssize_t start, Py_ssize_t end):
    return (<char *>p)[start:end].decode("utf-8")


cdef object _unicode_number(str text, uint64_t positive_max):
    """A field with non-ASCII characters, as the Python twin reads it: a sign, then Unicode decimal digits."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not digits.isdecimal():
        raise ValueError(f"not a number: {text!r:.40}")
    value = int(text)
    if not -<object>positive_max - 1 <= value <= <object>positive_max:
        raise ValueError(f"out of range: {text!r:.40}")
    return value


cdef object _number(const unsigned char *p, Py_ssize_t start, Py_ssize_t end, uint64_t positive_max):
    """The field [start, end) as Java's Integer.parseInt (positive_max INT32_MAX) or Long.parseLong (INT64_MAX) reads
    it; ValueError with the twin's message when it does not."""
    cdef Py_ssize_t i = start
    cdef bint negative = False
    cdef uint64_t value = 0, limit = positive_max + 1  # (a negative number's magnitude may reach it)
    cdef bint over = False
    cdef unsigned char c
    if i < end and (p[i] == 43 or p[i] == 45):
        negative = p[i] == 45
        i += 1
    if i == end:
        raise ValueError(f"not a number: {_text(p, start, end)!r:.40}")
    for j in range(i, end):
        c = p[j]
        if c >= 0x80:
            return _unicode_number(_text(p, start, end), positive_max)
        if c < 48 or c > 57:
            raise ValueError(f"not a number: {_text(p, start, end)!r:.40}")
        if not over:  # (leading zeros are allowed: the digits past the limit are still checked)
            over = value > limit // 10
            value = value * 10 + (c - 48)
            over = over or value > limit
    if over or value > positive_max + negative:
        raise ValueError(f"out of range: {_text(p, start, end)!r:.40}")
    if negative:
        return -<object>value
    return <object>value


def parse_offsets(data: bytes, path: str = "") -> dict:
    """The entries of an offset checkpoint file's bytes ({(topic, partition): offset}, a partition listed twice: its
    last line), or KafkaStorageError naming `path` when Kafka refuses the file."""
    try:
        return _parse(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise KafkaStorageError(f"malformed checkpoint file: {exc}", file=path) from exc


cdef dict _parse(bytes data):
    cdef const unsigned char *p = <const unsigned char *>PyBytes_AS_STRING(data)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(data)
    cdef Py_ssize_t i, start, end, parts, count
    cdef Py_ssize_t bounds[8]  # [start, end) of up to four fields
    cdef Py_ssize_t entries = 0
    cdef Py_ssize_t topic_start = 0, topic_len = -1
    cdef dict out = {}
    cdef object topic = None
    for i in range(n):
        if p[i] >= 0x80:
            data.decode("utf-8")  # (refused as the twin refuses it: the same decoder's error)
            break
    if n == 0:
        return out
    end = _line_end(p, 0, n)
    if _number(p, 0, end, INT32_MAX) != VERSION:
        raise ValueError(f"unsupported version {_text(p, 0, end)!r:.40} (expected {VERSION})")
    start = _next_line(p, end, n)
    if start >= n:
        return out
    end = _line_end(p, start, n)
    count = _number(p, start, end, INT32_MAX)
    if count < 0:
        raise ValueError(f"a negative entry count {count}")
    start = _next_line(p, end, n)
    while start < n:
        end = _line_end(p, start, n)
        parts, i = 0, start  # the fields, cut at runs of whitespace; whitespace after the last one is not a field
        while True:
            bounds[2 * parts] = i
            while i < end and not _space(p[i]):
                i += 1
            bounds[2 * parts + 1] = i
            parts += 1
            while i < end and _space(p[i]):
                i += 1
            if i >= end or parts == 4:
                break
        if parts != 3:
            raise ValueError(f"malformed line {_text(p, start, end)!r:.200}")
        if bounds[1] - start != topic_len or memcmp(p + start, p + topic_start, topic_len) != 0:
            topic, topic_start, topic_len = _text(p, start, bounds[1]), start, bounds[1] - start
        partition = _number(p, bounds[2], bounds[3], INT32_MAX)
        PyDict_SetItem(out, (topic, partition), _number(p, bounds[4], bounds[5], INT64_MAX))
        entries += 1
        start = _next_line(p, end, n)
    if entries != count:
        raise ValueError(f"expected {count} entries, found {entries}")
    return out
