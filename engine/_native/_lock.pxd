# cython: language_level=3
"""The native lock (see _lock.pyx) and the pthread mutex it is made of, for other native modules."""


cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    int pthread_mutex_init(pthread_mutex_t *mutex, const void *attr)
    int pthread_mutex_destroy(pthread_mutex_t *mutex)
    int pthread_mutex_lock(pthread_mutex_t *mutex)
    int pthread_mutex_trylock(pthread_mutex_t *mutex)
    int pthread_mutex_unlock(pthread_mutex_t *mutex)


cdef inline void wait_for(pthread_mutex_t *mutex) noexcept:
    """Take a mutex, letting the GIL go only to wait for it (CPython 3.11's own lock reads the monotonic clock on
    every acquire, even an uncontended one)."""
    if pthread_mutex_trylock(mutex):
        with nogil:
            pthread_mutex_lock(mutex)


cdef class Lock:
    cdef pthread_mutex_t _mutex
    cdef bint _made, _reentrant
    cdef unsigned long _owner
    cdef Py_ssize_t _count
    cdef int take(self) except -1
    cdef int give(self) except -1
