# cython: language_level=3
"""A lock for the segment layer's hot paths, with threading.Lock's and threading.RLock's Python API (acquire with
`blocking`, release, the context manager) and, for other native modules, `take`/`give` calls that cost a
few nanoseconds where a call into threading's locks costs ~60 ns (argument parsing and a clock read on every
acquire, in CPython 3.11). segments.fs.new_lock makes one (threading's, for the pure-Python twin).

It is a pthread mutex plus, when reentrant, its owner's thread id and a hold count. The owner and the count are read
and written only while the GIL is held, so they need no lock of their own; the GIL is let go only while waiting for
the mutex (waiting with the GIL held would stop the holder from ever giving it back). A non-reentrant lock may be
released by another thread, as threading.Lock may.
"""
cimport cython
from cpython.pythread cimport PyThread_get_thread_ident


@cython.final
cdef class Lock:
    """A mutex (reentrant unless made with `reentrant=False`) taken without the GIL's help."""

    def __cinit__(self, bint reentrant=True):
        if pthread_mutex_init(&self._mutex, NULL):
            raise MemoryError()
        self._made, self._reentrant, self._owner, self._count = True, reentrant, 0, 0

    def __dealloc__(self):
        if self._made:
            pthread_mutex_destroy(&self._mutex)

    cdef int take(self) except -1:
        cdef unsigned long me
        if self._reentrant:
            me = PyThread_get_thread_ident()
            if self._count and self._owner == me:
                self._count += 1
                return 0
            wait_for(&self._mutex)
            self._owner = me
        else:
            wait_for(&self._mutex)
        self._count = 1
        return 0

    cdef int give(self) except -1:
        if not self._count or (self._reentrant and self._owner != PyThread_get_thread_ident()):
            raise RuntimeError("cannot release un-acquired lock")
        self._count -= 1
        if not self._count:
            self._owner = 0
            pthread_mutex_unlock(&self._mutex)
        return 0

    def acquire(self, bint blocking=True, double timeout=-1):
        """Take the lock (a reentrant one again, by its holder); True, or False when not `blocking` and another
        thread holds it. A timeout is not supported."""
        if timeout != -1:
            raise ValueError("a timeout is not supported by this lock")
        if blocking:
            self.take()
            return True
        if self._reentrant and self._count and self._owner == PyThread_get_thread_ident():
            self._count += 1
            return True
        if pthread_mutex_trylock(&self._mutex):
            return False
        self._owner = PyThread_get_thread_ident() if self._reentrant else 0
        self._count = 1
        return True

    def release(self):
        """Let the lock go (a reentrant one once per acquire); RuntimeError when it is not held (by this thread)."""
        self.give()

    def __enter__(self):
        self.take()
        return True

    def __exit__(self, *exc):
        self.give()
