/* Faults injected into one broker process by LD_PRELOAD: a slow disk, a jumped wall clock and
 * a failing disk.
 *
 * Slow disk: fsync, fdatasync, sync_file_range and msync(MS_SYNC) first sleep the number of
 * milliseconds in the file named by RAFTKA_FAULT_FSYNC_DELAY_FILE (absent, empty or 0: no
 * delay), then do the real call: the data still reaches the disk, only later.
 *
 * Jumped wall clock: clock_gettime(CLOCK_REALTIME*), gettimeofday and time add the signed
 * number of milliseconds in the file named by RAFTKA_FAULT_CLOCK_OFFSET_FILE, as an NTP step
 * would; CLOCK_MONOTONIC and CLOCK_BOOTTIME are left alone (a step never moves them). The file
 * is re-read at most every 100 ms of monotonic time, so a jump takes effect within that.
 *
 * Failing disk: write, pwrite(64), fsync and fdatasync of a file whose path starts with the
 * prefix in the file named by RAFTKA_FAULT_EIO_PATH_FILE fail with EIO (absent or empty: no
 * failures), as on a disk that died under one mount point: one log directory of a broker with
 * several (tests/compat/test_jbod.py). Re-read at most every 100 ms, like the clock offset.
 *
 * The delay and offset files are written by the nemeses (tests/chaos/nemesis.py); compiled
 * at run time with `cc -shared -fPIC -O2 -o fault_shim.so fault_shim.c -ldl`.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define REREAD_NS 100000000LL
#define MAX_DELAY_MS 600000L

static long long read_number(const char *env_name) {
    const char *path = getenv(env_name);
    if (path == NULL) return 0;
    int saved = errno;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        errno = saved;
        return 0;
    }
    char buf[32];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    errno = saved;
    if (n <= 0) return 0;
    buf[n] = '\0';
    return strtoll(buf, NULL, 10);
}

static void *real(const char *name) { return dlsym(RTLD_NEXT, name); }

/* -- failing disk ------------------------------------------------------------------------- */

#define PREFIX_MAX 1024
static char failing_prefixes[2][PREFIX_MAX]; /* double-buffered: readers use the current one */
static int failing_current;                  /* atomically read and written */
static long long failing_next_read_ns;
static int (*real_clock_gettime)(clockid_t, struct timespec *);

static const char *failing_prefix(void) {
    if (real_clock_gettime == NULL)
        real_clock_gettime = (int (*)(clockid_t, struct timespec *))real("clock_gettime");
    struct timespec now;
    if (real_clock_gettime(CLOCK_MONOTONIC, &now) == 0) {
        long long now_ns = now.tv_sec * 1000000000LL + now.tv_nsec;
        if (now_ns >= __atomic_load_n(&failing_next_read_ns, __ATOMIC_RELAXED)) {
            __atomic_store_n(&failing_next_read_ns, now_ns + REREAD_NS, __ATOMIC_RELAXED);
            const char *path = getenv("RAFTKA_FAULT_EIO_PATH_FILE");
            int next = 1 - __atomic_load_n(&failing_current, __ATOMIC_ACQUIRE);
            char *buf = failing_prefixes[next];
            buf[0] = '\0';
            int saved = errno;
            int fd = path == NULL ? -1 : open(path, O_RDONLY | O_CLOEXEC);
            if (fd >= 0) {
                ssize_t n = read(fd, buf, PREFIX_MAX - 1);
                close(fd);
                buf[n > 0 ? n : 0] = '\0';
                buf[strcspn(buf, "\r\n")] = '\0';
            }
            errno = saved;
            __atomic_store_n(&failing_current, next, __ATOMIC_RELEASE);
        }
    }
    return failing_prefixes[__atomic_load_n(&failing_current, __ATOMIC_ACQUIRE)];
}

/* Whether `fd` is a file under the failing prefix (errno left as it was). */
static int fails_with_eio(int fd) {
    const char *prefix = failing_prefix();
    size_t prefix_len = strlen(prefix);
    if (prefix_len == 0) return 0;
    int saved = errno;
    char link[64], target[PREFIX_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    errno = saved;
    if (n <= 0) return 0;
    target[n] = '\0';
    return strncmp(target, prefix, prefix_len) == 0;
}

#define FAIL_IF_FAILING(fd)    \
    do {                       \
        if (fails_with_eio(fd)) { \
            errno = EIO;       \
            return -1;         \
        }                      \
    } while (0)

ssize_t write(int fd, const void *buf, size_t count) {
    static ssize_t (*fn)(int, const void *, size_t);
    if (fn == NULL) fn = (ssize_t(*)(int, const void *, size_t))real("write");
    FAIL_IF_FAILING(fd);
    return fn(fd, buf, count);
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    static ssize_t (*fn)(int, const void *, size_t, off_t);
    if (fn == NULL) fn = (ssize_t(*)(int, const void *, size_t, off_t))real("pwrite");
    FAIL_IF_FAILING(fd);
    return fn(fd, buf, count, offset);
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off_t offset) {
    static ssize_t (*fn)(int, const void *, size_t, off_t);
    if (fn == NULL) fn = (ssize_t(*)(int, const void *, size_t, off_t))real("pwrite64");
    FAIL_IF_FAILING(fd);
    return fn(fd, buf, count, offset);
}

/* -- slow disk ---------------------------------------------------------------------------- */

static void sleep_before_sync(void) {
    long long ms = read_number("RAFTKA_FAULT_FSYNC_DELAY_FILE");
    if (ms <= 0 || ms > MAX_DELAY_MS) return;
    int saved = errno;
    struct timespec left = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&left, &left) != 0 && errno == EINTR) {
    }
    errno = saved;
}

int fsync(int fd) {
    static int (*fn)(int);
    if (fn == NULL) fn = (int (*)(int))real("fsync");
    sleep_before_sync();
    FAIL_IF_FAILING(fd);
    return fn(fd);
}

int fdatasync(int fd) {
    static int (*fn)(int);
    if (fn == NULL) fn = (int (*)(int))real("fdatasync");
    sleep_before_sync();
    FAIL_IF_FAILING(fd);
    return fn(fd);
}

int sync_file_range(int fd, off_t offset, off_t nbytes, unsigned int flags) {
    static int (*fn)(int, off_t, off_t, unsigned int);
    if (fn == NULL) fn = (int (*)(int, off_t, off_t, unsigned int))real("sync_file_range");
    sleep_before_sync();
    return fn(fd, offset, nbytes, flags);
}

int msync(void *addr, size_t length, int flags) {
    static int (*fn)(void *, size_t, int);
    if (fn == NULL) fn = (int (*)(void *, size_t, int))real("msync");
    if (flags & MS_SYNC) sleep_before_sync();
    return fn(addr, length, flags);
}

/* -- jumped wall clock -------------------------------------------------------------------- */

static long long offset_ms;     /* atomically read and written */
static long long next_read_ns;  /* monotonic ns of the next re-read */

static long long wall_offset_ms(void) {
    struct timespec now;
    if (real_clock_gettime(CLOCK_MONOTONIC, &now) == 0) {
        long long now_ns = now.tv_sec * 1000000000LL + now.tv_nsec;
        if (now_ns >= __atomic_load_n(&next_read_ns, __ATOMIC_RELAXED)) {
            __atomic_store_n(&next_read_ns, now_ns + REREAD_NS, __ATOMIC_RELAXED);
            __atomic_store_n(&offset_ms, read_number("RAFTKA_FAULT_CLOCK_OFFSET_FILE"),
                             __ATOMIC_RELAXED);
        }
    }
    return __atomic_load_n(&offset_ms, __ATOMIC_RELAXED);
}

static void shift(struct timespec *ts, long long ms) {
    long long ns = ts->tv_nsec + (ms % 1000) * 1000000LL;
    ts->tv_sec += ms / 1000 + ns / 1000000000LL;
    ns %= 1000000000LL;
    if (ns < 0) {
        ns += 1000000000LL;
        ts->tv_sec -= 1;
    }
    ts->tv_nsec = ns;
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    if (real_clock_gettime == NULL)
        real_clock_gettime = (int (*)(clockid_t, struct timespec *))real("clock_gettime");
    int rc = real_clock_gettime(clock, ts);
    if (rc == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE)) {
        long long ms = wall_offset_ms();
        if (ms != 0) shift(ts, ms);
    }
    return rc;
}

int gettimeofday(struct timeval *tv, void *tz) {
    struct timespec ts;
    (void)tz;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return -1;
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *out) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return (time_t)-1;
    if (out != NULL) *out = ts.tv_sec;
    return ts.tv_sec;
}
