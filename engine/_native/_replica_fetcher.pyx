# cython: language_level=3
"""The native replica fetcher: one thread, without the GIL, running the steady-state fetch rounds of every follower
replica linked to it (see engine.replication.replica_fetcher for when a follower is linked and what the Python side
keeps doing). A round copies the leader's new bytes of its active segment to the follower's active segment, as a
fetch and a follower append of them would:

1. pread(2) of the bytes the leader's appends published since the link's last round (at most ROUND_BYTES, whole
   batches; one larger batch is read whole);
2. each batch checked as the follower's append checks it (engine._native._records.replica_batch: framing, magic, CRC),
   and checked to be what this path may append: the next offset, the link's leader epoch, not a control batch;
3. write(2) of the checked batches to the follower's `.log` (opened for appending), nothing else;
4. with the fetcher's mutex held: the batches' 61-byte headers kept for the Python side (`Link.take`: the follower's
   indexes, LEO and producer state are brought up to date from them, the write skipped), the follower's log end
   recorded at the leader as its next fetch would record it (engine._native._replica's Progress: the caught-up rule),
   the leader's high watermark as the smallest log end over its followers once every one is linked, and the waiters
   told (`Leader.wait`, `Link.settle`).

A batch this path may not append stops the link before it, with the reason (`Link.reason`): a control batch, another
leader epoch, an offset gap, a check that fails, the leader's segment rolled, a failed read or write (the follower's
file is cut back to its length before the round; `Link.error` is the errno), too many headers kept, the leadership
gone. A stopped link does nothing more; the Python side unlinks it and takes the round over (its general path raises
the precise error, if any).
Byte layout: none of its own (the leader's and the follower's `.log` bytes, byte for byte).
Crash policy: a follower's log end counts at the leader only once its bytes are written (in the page cache, as a
follower append's are), so a killed process leaves the follower's file holding every byte the high watermark
counted; recovery rebuilds the indexes and producer state from it.
Thread-safety: every field below is read and written under the fetcher's mutex, except a round's buffer and file
descriptors, which only the thread uses while the link is `busy`; a caller waiting here lets the GIL go.
"""
cimport cython
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.errno cimport EINTR, errno
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, realloc
from libc.string cimport memcpy

from engine._native._codec cimport HEADER_SIZE
from engine._native._log_scan cimport read_all
from engine._native._records cimport replica_batch
from engine._native._lock cimport pthread_mutex_destroy, pthread_mutex_init, pthread_mutex_lock, pthread_mutex_t
from engine._native._lock cimport pthread_mutex_unlock, wait_for
from engine._native._replica cimport Progress, Replica, on_fetch

cdef extern from "crc32c_impl.h":  # its inline byte-order helpers only
    uint32_t kl_be32(const uint8_t *p) nogil
    uint64_t kl_be64(const uint8_t *p) nogil

cdef extern from "<unistd.h>" nogil:
    ssize_t write(int fd, const void *buf, size_t n)
    int ftruncate(int fd, long length)
    int close(int fd)

cdef extern from "<time.h>" nogil:
    cdef struct timespec:
        long tv_sec
        long tv_nsec
    int clock_gettime(int clock, timespec *t)
    enum: CLOCK_REALTIME
    enum: CLOCK_MONOTONIC

cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_cond_t:
        pass
    ctypedef unsigned long pthread_t
    int pthread_cond_init(pthread_cond_t *c, const void *attr)
    int pthread_cond_destroy(pthread_cond_t *c)
    int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m)
    int pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m, const timespec *t)
    int pthread_cond_broadcast(pthread_cond_t *c)
    int pthread_cond_signal(pthread_cond_t *c)
    int pthread_create(pthread_t *t, const void *attr, void *(*run)(void *) noexcept nogil, void *arg)
    int pthread_join(pthread_t t, void **out)

cdef enum:
    MAX_FOLLOWERS = 64          # of one leader that may be linked
    ROUND_BYTES = 1 << 20       # the most one round reads (one larger batch is read whole)
    HEADERS_MAX = 1 << 20       # bytes of headers a link keeps before it stops for the Python side to take them
    SPIN_NS = 200000            # how long the thread looks for more work before it sleeps
    WAIT_SPIN_NS = 100000       # how long a waiter for the HW looks before it sleeps

# why a link stopped (0: it runs)
cdef enum:
    RUNNING, ROLLED, CONTROL, EPOCH, GAP, INVALID, SHORT_READ, IO_ERROR, FULL, LEADER_GONE, UNLINKED
REASONS = ("running", "rolled", "control batch", "leader epoch", "offset gap", "invalid batch", "short read",
           "I/O error", "headers full", "leadership gone", "unlinked")


cdef struct LeaderState:
    int64_t seg_base, seg_pos, leo     # the leader's active segment, its end, the log end (its last publish)
    int64_t hw                         # the smallest log end over the followers, once all are linked; -1 before
    int n_followers, n_links
    bint gone
    LinkState *links[MAX_FOLLOWERS]


cdef struct LinkState:
    LeaderState *leader
    Progress *progress                 # the follower's Replica at the leader
    int src_fd, dst_fd                 # the leader's segment (read), the follower's (append); the link owns both
    int64_t base                       # both active segments' base offset
    int64_t pos, leo                   # the follower's segment end and log end, as this thread wrote them
    int64_t target                     # the leader's segment end this link copies up to
    int32_t epoch                      # the leader epoch every batch must carry
    int reason, error
    bint busy, listed
    uint8_t *headers
    size_t hlen, hcap


cdef struct FetcherState:
    pthread_mutex_t mutex
    pthread_cond_t work, done
    LinkState **links
    Py_ssize_t n_links, cap, next
    bint stop, sleeping
    long published                     # bumped by every publish that gives a link more to copy
    uint8_t *buf
    size_t buf_cap


cdef extern from *:
    """
    static inline long kl_load(volatile long *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
    static inline void kl_bump(volatile long *p) { __atomic_add_fetch(p, 1, __ATOMIC_RELEASE); }
    static inline int64_t kl_load64(int64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
    static inline void kl_store64(int64_t *p, int64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
    #if defined(__x86_64__) || defined(__i386__)
    static inline void kl_pause(void) { __builtin_ia32_pause(); }
    #else
    static inline void kl_pause(void) { }
    #endif
    """
    long kl_load(volatile long *p) nogil
    void kl_bump(volatile long *p) nogil
    int64_t kl_load64(int64_t *p) nogil
    void kl_store64(int64_t *p, int64_t v) nogil
    void kl_pause() nogil


cdef int64_t now_ns() noexcept nogil:
    cdef timespec t
    clock_gettime(CLOCK_MONOTONIC, &t)
    return <int64_t>t.tv_sec * 1000000000 + t.tv_nsec


cdef int64_t now_ms() noexcept nogil:
    """SystemClock.time_ms: the wall clock in ms (a linked follower's engine runs on the system clock)."""
    cdef timespec t
    clock_gettime(CLOCK_REALTIME, &t)
    return <int64_t>t.tv_sec * 1000 + t.tv_nsec // 1000000


cdef void deadline_in(timespec *t, int64_t ms) noexcept nogil:
    clock_gettime(CLOCK_REALTIME, t)
    t.tv_sec += ms // 1000
    t.tv_nsec += (ms % 1000) * 1000000
    if t.tv_nsec >= 1000000000:
        t.tv_sec += 1
        t.tv_nsec -= 1000000000


cdef void stop_link(LinkState *link, int reason) noexcept nogil:
    if link.reason == RUNNING:
        link.reason = reason


cdef bint runnable(LinkState *link) noexcept nogil:
    return link.reason == RUNNING and link.target > link.pos


cdef void wake(FetcherState *s) noexcept nogil:
    """Wake the thread if it sleeps (the mutex held)."""
    if s.sleeping:
        pthread_cond_signal(&s.work)


cdef bint leader_runs(LeaderState *leader) noexcept nogil:
    """Every follower of the leader is linked and its link runs."""
    cdef int i
    if leader.gone or leader.n_links < leader.n_followers:
        return False
    for i in range(leader.n_links):
        if leader.links[i].reason != RUNNING:
            return False
    return True


cdef bint any_busy(LeaderState *leader) noexcept nogil:
    cdef int i
    for i in range(leader.n_links):
        if leader.links[i].busy:
            return True
    return False


cdef void raise_hw(LeaderState *leader) noexcept nogil:
    """The leader's HW over its followers' log ends (only once every follower is linked)."""
    cdef int64_t hw = leader.leo
    cdef int i
    if leader.n_links < leader.n_followers:
        return
    for i in range(leader.n_links):
        if leader.links[i].leo < hw:
            hw = leader.links[i].leo
    if hw > leader.hw:
        kl_store64(&leader.hw, hw)  # (a waiter spinning reads it without the mutex)


cdef int write_all(int fd, const uint8_t *buf, size_t n) noexcept nogil:
    cdef size_t done = 0
    cdef ssize_t r
    while done < n:
        r = write(fd, buf + done, n - done)
        if r < 0:
            if errno == EINTR:
                continue
            return -1
        done += <size_t>r
    return 0


cdef Py_ssize_t checked(LinkState *link, const uint8_t *p, Py_ssize_t n, int64_t *leo, int *reason) noexcept nogil:
    """The bytes of whole batches at `p` this path may append after log end `leo` (moved past them); `reason` set
    when a batch stops the link before it."""
    cdef Py_ssize_t at = 0, size
    cdef int64_t base
    while at < n:
        if n - at < HEADER_SIZE or 12 + <int64_t><int32_t>kl_be32(p + at + 8) > n - at:
            break  # the next batch is not all here (the round reads on from it)
        size = replica_batch(p + at, n - at)
        if size < 0:
            reason[0] = INVALID
            break
        base = <int64_t>kl_be64(p + at)
        if base != leo[0]:
            reason[0] = GAP
            break
        if <int32_t>kl_be32(p + at + 12) != link.epoch:
            reason[0] = EPOCH
            break
        if p[at + 22] & 0x20:
            reason[0] = CONTROL
            break
        leo[0] = base + <int32_t>kl_be32(p + at + 23) + 1
        at += size
    return at


cdef int keep_headers(LinkState *link, const uint8_t *p, Py_ssize_t n) noexcept nogil:
    """Keep each batch's header from the `n` checked bytes at `p` for `Link.take`; -1 when out of memory."""
    cdef Py_ssize_t at = 0, count = 0
    cdef size_t need
    cdef uint8_t *grown
    while at < n:
        count += 1
        at += 12 + <int32_t>kl_be32(p + at + 8)
    need = link.hlen + <size_t>count * HEADER_SIZE
    if need > link.hcap:
        grown = <uint8_t *>realloc(link.headers, need * 2)
        if grown == NULL:
            return -1
        link.headers, link.hcap = grown, need * 2
    at = 0
    while at < n:
        memcpy(link.headers + link.hlen, p + at, HEADER_SIZE)
        link.hlen += HEADER_SIZE
        at += 12 + <int32_t>kl_be32(p + at + 8)
    return 0


cdef void round_of(FetcherState *s, LinkState *link) noexcept nogil:
    """One round for `link` (marked busy; the mutex not held); its results recorded with the mutex held."""
    cdef int64_t start = link.pos, leo = link.leo
    cdef size_t want = <size_t>(link.target - start), n
    cdef Py_ssize_t got, ok = 0
    cdef int reason = RUNNING, error = 0
    cdef uint8_t *grown
    n = want if want < ROUND_BYTES else ROUND_BYTES
    while True:
        if n > s.buf_cap:
            grown = <uint8_t *>realloc(s.buf, n)
            if grown == NULL:
                reason, error = IO_ERROR, 12  # ENOMEM
                break
            s.buf, s.buf_cap = grown, n
        got = read_all(link.src_fd, s.buf, n, start)
        if got < 0:
            reason, error = IO_ERROR, errno
            break
        ok = checked(link, s.buf, got, &leo, &reason)
        if ok or reason != RUNNING:
            break
        if got < <Py_ssize_t>n:  # the published bytes are not all in the leader's file
            reason = SHORT_READ
            break
        if got >= HEADER_SIZE and n < want:  # one batch larger than a round: read it whole
            n = <size_t>(12 + <int32_t>kl_be32(s.buf + 8))
            if n > want:
                reason = INVALID
                break
            continue
        reason = INVALID
        break
    if ok and write_all(link.dst_fd, s.buf, <size_t>ok) < 0:
        reason, error = IO_ERROR, errno
        ftruncate(link.dst_fd, start)  # what a failed write left goes (the Python side cuts it again if this fails)
        ok = 0
    pthread_mutex_lock(&s.mutex)
    if ok:
        if keep_headers(link, s.buf, ok) < 0:
            reason, error = IO_ERROR, 12
            ftruncate(link.dst_fd, start)
        else:
            link.pos, link.leo = start + ok, leo
            on_fetch(link.progress, leo, link.leader.leo, now_ms())  # its next fetch, sent at once
            raise_hw(link.leader)
    if reason != RUNNING:
        stop_link(link, reason)
        link.error = error
    elif link.hlen >= HEADERS_MAX:
        stop_link(link, FULL)
    if link.pos >= link.target and link.base != link.leader.seg_base:
        stop_link(link, ROLLED)
    link.busy = False
    pthread_cond_broadcast(&s.done)
    pthread_mutex_unlock(&s.mutex)


cdef void *run(void *arg) noexcept nogil:
    cdef FetcherState *s = <FetcherState *>arg
    cdef LinkState *link
    cdef Py_ssize_t i, k
    cdef int64_t spin_from = -1
    cdef long seen = 0
    pthread_mutex_lock(&s.mutex)
    while not s.stop:
        link = NULL
        for i in range(s.n_links):  # round robin: the next runnable link after the last one served
            k = (s.next + i) % s.n_links
            if runnable(s.links[k]):
                link = s.links[k]
                s.next = k + 1
                break
        if link == NULL:
            if spin_from < 0:  # waking a sleeping thread costs the waker microseconds: look for work a while first
                spin_from = now_ns()
            if now_ns() - spin_from < SPIN_NS:
                seen = s.published  # (what this scan saw: wait for a publish after it, the mutex let go)
                pthread_mutex_unlock(&s.mutex)
                while kl_load(&s.published) == seen and now_ns() - spin_from < SPIN_NS:
                    kl_pause()
                pthread_mutex_lock(&s.mutex)
                continue
            s.sleeping = True
            pthread_cond_wait(&s.work, &s.mutex)
            s.sleeping = False
            spin_from = -1
            continue
        spin_from = -1
        link.busy = True
        pthread_mutex_unlock(&s.mutex)
        round_of(s, link)
        pthread_mutex_lock(&s.mutex)
    pthread_mutex_unlock(&s.mutex)
    return NULL


cdef void take_off(FetcherState *s, LinkState *st) noexcept nogil:
    """Take a listed link off the thread's and its leader's lists, its round in progress ended first (s.mutex held)."""
    cdef LeaderState *ls = st.leader
    cdef Py_ssize_t i, k
    stop_link(st, UNLINKED)
    while st.busy:
        pthread_cond_wait(&s.done, &s.mutex)
    k = 0
    for i in range(s.n_links):
        if s.links[i] != st:
            s.links[k] = s.links[i]
            k += 1
    s.n_links, s.next = k, 0
    k = 0
    for i in range(ls.n_links):
        if ls.links[i] != st:
            ls.links[k] = ls.links[i]
            k += 1
    ls.n_links = k
    st.listed = False
    pthread_cond_broadcast(&s.done)


cdef class Leader:
    """A leader partition's side of its links: what its appends publish, and its HW over linked followers."""

    cdef LeaderState *state
    cdef Fetcher fetcher

    def __cinit__(self, Fetcher fetcher, int n_followers):
        if not 0 < n_followers <= MAX_FOLLOWERS:
            raise ValueError(f"a leader with {n_followers} followers cannot be linked (at most {MAX_FOLLOWERS})")
        self.state = <LeaderState *>calloc(1, sizeof(LeaderState))
        if self.state == NULL:
            raise MemoryError()
        self.fetcher = fetcher
        self.state.n_followers, self.state.hw = n_followers, -1

    def __dealloc__(self):
        free(self.state)  # (every link holds its leader, so none is left to point here)

    def publish(self, int64_t seg_base, int64_t seg_pos, int64_t leo) -> None:
        """An append made the leader's active segment `seg_base` end at `seg_pos`, and its log at `leo`."""
        cdef FetcherState *s = self.fetcher.state
        cdef LeaderState *st = self.state
        cdef int i
        wait_for(&s.mutex)  # (held only briefly by the thread: the GIL is let go only if it must wait)
        if not st.gone:
            st.seg_base, st.seg_pos, st.leo = seg_base, seg_pos, leo
            for i in range(st.n_links):
                if st.links[i].base == seg_base and seg_pos > st.links[i].target:
                    st.links[i].target = seg_pos
                    kl_bump(&s.published)
                    wake(s)
                elif st.links[i].base != seg_base and st.links[i].pos >= st.links[i].target:
                    stop_link(st.links[i], ROLLED)
                    pthread_cond_broadcast(&s.done)
        pthread_mutex_unlock(&s.mutex)

    @property
    def linked(self) -> bool:
        """Every follower is linked and its link runs (its HW is then this module's to move)."""
        return leader_runs(self.state)

    @property
    def high_watermark(self) -> int:
        return self.state.hw

    def wait(self, int64_t offset, int64_t timeout_ms) -> int:
        """Wait (the GIL let go) until the HW passes `offset`, a link stops, or `timeout_ms` passed; the HW."""
        cdef FetcherState *s = self.fetcher.state
        cdef LeaderState *st = self.state
        cdef timespec deadline
        cdef int64_t spin_from
        if st.hw > offset:
            return st.hw
        with nogil:
            deadline_in(&deadline, timeout_ms)
            pthread_mutex_lock(&s.mutex)
            wake(s)
            pthread_mutex_unlock(&s.mutex)
            spin_from = now_ns()  # a sleeping waiter is slow to wake here: its rounds take microseconds, look first
            while kl_load64(&st.hw) <= offset and now_ns() - spin_from < WAIT_SPIN_NS:
                kl_pause()
            pthread_mutex_lock(&s.mutex)
            while st.hw <= offset and leader_runs(st) and not pthread_cond_timedwait(&s.done, &s.mutex, &deadline):
                pass
            pthread_mutex_unlock(&s.mutex)
        return st.hw

    def close(self) -> None:
        """The leadership is gone: every link stops, and the rounds running for them end first."""
        cdef FetcherState *s = self.fetcher.state
        cdef LeaderState *st = self.state
        cdef int i
        wait_for(&s.mutex)
        st.gone = True
        for i in range(st.n_links):
            stop_link(st.links[i], LEADER_GONE)
        pthread_cond_broadcast(&s.done)
        while any_busy(st):
            with nogil:
                pthread_cond_wait(&s.done, &s.mutex)
        pthread_mutex_unlock(&s.mutex)


@cython.no_gc_clear
cdef class Link:
    """One follower replica in the steady state: it owns the two descriptors it was given. The garbage collector
    never clears its references: a link dropped while still listed (its engine never closed) holds its fetcher,
    leader and replica until its own deallocation has taken it off the thread."""

    cdef LinkState *state
    cdef Fetcher fetcher
    cdef Leader leader
    cdef Replica replica

    def __dealloc__(self):
        cdef FetcherState *s
        if self.state != NULL:
            if self.state.listed and self.fetcher is not None:  # the thread may reach it still: off its list first
                s = self.fetcher.state
                with nogil:
                    pthread_mutex_lock(&s.mutex)
                    take_off(s, self.state)
                    pthread_mutex_unlock(&s.mutex)
            if self.state.src_fd >= 0:
                close(self.state.src_fd)
            if self.state.dst_fd >= 0:
                close(self.state.dst_fd)
            free(self.state.headers)
            free(self.state)

    @property
    def running(self) -> bool:
        return self.state.reason == RUNNING

    @property
    def reason(self) -> str:
        return REASONS[self.state.reason]

    @property
    def error(self) -> int:
        """The errno of the read or write that stopped the link (0 if none did)."""
        return self.state.error

    @property
    def log_end_offset(self) -> int:
        return self.state.leo

    def take(self) -> bytes:
        """The headers of the batches written since the last take, in order (61 bytes each)."""
        cdef FetcherState *s = self.fetcher.state
        cdef object out
        wait_for(&s.mutex)
        try:
            out = PyBytes_FromStringAndSize(<char *>self.state.headers, <Py_ssize_t>self.state.hlen)
            self.state.hlen = 0
        finally:
            pthread_mutex_unlock(&s.mutex)
        return out

    def unlink(self) -> None:
        """Take the link off its fetcher's thread (a round in progress ends first); its headers stay for `take`."""
        self.fetcher.unlink(self)

    def settle(self, int64_t timeout_ms) -> None:
        """Wait (the GIL let go) until the link has copied all the leader published, stopped, or `timeout_ms` passed."""
        cdef FetcherState *s = self.fetcher.state
        cdef LinkState *st = self.state
        cdef timespec deadline
        with nogil:
            deadline_in(&deadline, timeout_ms)
            pthread_mutex_lock(&s.mutex)
            wake(s)
            while (st.busy or runnable(st)) and not pthread_cond_timedwait(&s.done, &s.mutex, &deadline):
                pass
            pthread_mutex_unlock(&s.mutex)


cdef class Fetcher:
    """The thread and its links; `close()` stops the thread (unlink every link first)."""

    cdef FetcherState *state
    cdef pthread_t thread
    cdef bint started
    cdef list _links                   # the Link objects listed, kept alive while the thread may reach them

    def __cinit__(self):
        self.state = <FetcherState *>calloc(1, sizeof(FetcherState))
        if self.state == NULL:
            raise MemoryError()
        pthread_mutex_init(&self.state.mutex, NULL)
        pthread_cond_init(&self.state.work, NULL)
        pthread_cond_init(&self.state.done, NULL)
        self._links = []
        if pthread_create(&self.thread, NULL, run, self.state):
            raise OSError("could not start the native replica fetcher's thread")
        self.started = True

    def __dealloc__(self):
        if self.started:
            self._stop()
        pthread_cond_destroy(&self.state.work)
        pthread_cond_destroy(&self.state.done)
        pthread_mutex_destroy(&self.state.mutex)
        free(self.state.links)
        free(self.state.buf)
        free(self.state)

    max_followers = MAX_FOLLOWERS

    def leader(self, int n_followers) -> Leader:
        """A leader partition's side of the links of its `n_followers` followers."""
        return Leader(self, n_followers)

    def link(self, Leader leader not None, Replica replica not None, int src_fd, int dst_fd, int64_t base,
             int64_t pos, int64_t leo, int32_t epoch) -> Link:
        """Link a follower whose active segment (base offset `base`) ends at `pos` and log at `leo`, as the
        leader's (it publishes from here on): its rounds copy from `src_fd` to `dst_fd`, which the link now owns.
        The leader records the follower's log end as its next fetch would (the caller then moves the HW)."""
        cdef FetcherState *s = self.state
        cdef LeaderState *ls = leader.state
        cdef Link link = Link.__new__(Link)
        cdef LinkState **grown
        link.state = <LinkState *>calloc(1, sizeof(LinkState))
        if link.state == NULL:
            raise MemoryError()
        link.state.src_fd, link.state.dst_fd = src_fd, dst_fd
        link.state.base, link.state.pos, link.state.leo, link.state.target = base, pos, leo, pos
        link.state.epoch = epoch
        link.state.progress = &replica.progress
        link.state.leader = ls
        link.fetcher, link.leader, link.replica = self, leader, replica
        wait_for(&s.mutex)
        try:
            if not self.started:
                raise ValueError("the native replica fetcher is closed")
            if ls.gone or ls.n_links >= ls.n_followers:
                raise ValueError("the leader cannot take another link")
            if s.n_links == s.cap:
                grown = <LinkState **>realloc(s.links, (s.cap * 2 + 8) * sizeof(LinkState *))
                if grown == NULL:
                    raise MemoryError()
                s.links, s.cap = grown, s.cap * 2 + 8
            s.links[s.n_links] = link.state
            s.n_links += 1
            ls.links[ls.n_links] = link.state
            ls.n_links += 1
            link.state.listed = True
            ls.seg_base, ls.seg_pos, ls.leo = base, pos, leo  # (made under the leader's lock: no append between)
            on_fetch(link.state.progress, leo, leo, now_ms())  # the follower's next fetch, sent as it is linked
            raise_hw(ls)
        finally:
            pthread_mutex_unlock(&s.mutex)
        self._links.append(link)
        return link

    def unlink(self, Link link not None) -> None:
        """Take `link` off the thread (its round in progress ends first); its headers stay for `take`."""
        cdef FetcherState *s = self.state
        cdef LinkState *st = link.state
        if not st.listed:
            return
        wait_for(&s.mutex)
        with nogil:
            take_off(s, st)
        pthread_mutex_unlock(&s.mutex)
        close(st.src_fd)
        close(st.dst_fd)
        st.src_fd = st.dst_fd = -1
        self._links.remove(link)

    def close(self) -> None:
        """Stop the thread (its round in progress ends first); every link must be unlinked before."""
        if self._links:
            raise ValueError(f"{len(self._links)} links are still linked")
        if self.started:
            self._stop()

    cdef void _stop(self) noexcept:
        with nogil:
            pthread_mutex_lock(&self.state.mutex)
            self.state.stop = True
            pthread_cond_signal(&self.state.work)
            pthread_mutex_unlock(&self.state.mutex)
            pthread_join(self.thread, NULL)
        self.started = False
