/*
 * spawn-floor: the practical floor for a job runner on this machine.
 *
 *   spawn-floor [run|threads|capture|threads-capture] N J [COMMAND]
 *
 * Starts `sh -c COMMAND` (default COMMAND: `true`) N times with at most J children in
 * flight, with posix_spawn, reaping with waitpid.
 *
 *   run      children inherit stdin, stdout and stderr; the floor only spawns and reaps, from
 *            one thread.
 *   threads  the same from several threads (FLOOR_THREADS, default: the CPUs online, at
 *            least 2), each spawning and reaping: posix_spawn holds its calling thread until
 *            the child has exec'd, so only several threads can overlap spawns. The floor of
 *            a runner that spawns in parallel.
 *   capture  each child gets a pipe as its stdout; everything read from the pipes is copied
 *            to our stdout (64 KiB reads, poll over the J pipes), the "capture floor".
 *   threads-capture
 *            capture from several threads (as many as for threads, at most J), each with its
 *            own share of N and J: the floor of a runner that reads its jobs' output and
 *            spawns in parallel.
 *
 * FLOOR_SPIN_US=N (threads mode) makes each thread spend N µs of its own CPU before each
 * start, in a loop on its thread CPU clock: the floor of a runner whose threads each take
 * their own next job and spend N µs on it, to tell what a runner's CPU per job costs from
 * what one thread deciding for every slot costs (bench/README.md, "2026-12-07 (later)").
 *
 * Built by bench/run.sh with `cc -O2`. Exits 1 if a child failed, 2 on a usage or system
 * error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static const char *command = "true";
static int failures = 0;

static void die(const char *what) {
    perror(what);
    exit(2);
}

static void check_status(int status) {
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        failures++;
}

static pid_t start(int out_fd, int close_fd) {
    char *argv[] = {"sh", "-c", (char *)command, NULL};
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_t *pa = NULL;
    if (out_fd >= 0) {
        if (posix_spawn_file_actions_init(&actions) != 0)
            die("posix_spawn_file_actions_init");
        posix_spawn_file_actions_adddup2(&actions, out_fd, STDOUT_FILENO);
        posix_spawn_file_actions_addclose(&actions, out_fd);
        posix_spawn_file_actions_addclose(&actions, close_fd);
        pa = &actions;
    }
    pid_t pid;
    int rc;
    while ((rc = posix_spawn(&pid, "/bin/sh", pa, NULL, argv, environ)) == EAGAIN)
        usleep(1000);
    if (rc != 0) {
        errno = rc;
        die("posix_spawn");
    }
    if (pa)
        posix_spawn_file_actions_destroy(pa);
    return pid;
}

static void run_mode(long n, long j) {
    long started = 0, running = 0;
    while (started < n || running > 0) {
        while (started < n && running < j) {
            start(-1, -1);
            started++;
            running++;
        }
        int status;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0) {
            if (errno == EINTR)
                continue;
            die("waitpid");
        }
        check_status(status);
        running--;
    }
}

/* threads mode: shared counters; each thread claims a start under the cap, or reaps. */
static long t_n, t_j;
static atomic_long t_started, t_running, t_reaped;
static atomic_int t_failures;

/* FLOOR_SPIN_US, read by threads_mode before the threads start: the CPU to spend before
 * each start, in nanoseconds. */
static long spin_ns;

static long thread_cpu_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    return now.tv_sec * 1000000000L + now.tv_nsec;
}

static void spin(void) {
    if (spin_ns <= 0)
        return;
    long until = thread_cpu_ns() + spin_ns;
    while (thread_cpu_ns() < until)
        ;
}

static void *threads_worker(void *unused) {
    (void)unused;
    for (;;) {
        if (atomic_load(&t_reaped) >= t_n)
            return NULL;
        long running = atomic_load(&t_running);
        if (running < t_j && atomic_load(&t_started) < t_n &&
            atomic_compare_exchange_weak(&t_running, &running, running + 1)) {
            if (atomic_fetch_add(&t_started, 1) < t_n) {
                spin();
                start(-1, -1);
                continue;
            }
            atomic_fetch_sub(&t_running, 1);
            continue;
        }
        int status;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0) {
            if (errno == EINTR || errno == ECHILD) {
                /* ECHILD: another thread is between claiming a start and spawning it. */
                sched_yield();
                continue;
            }
            die("waitpid");
        }
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            atomic_fetch_add(&t_failures, 1);
        atomic_fetch_sub(&t_running, 1);
        atomic_fetch_add(&t_reaped, 1);
    }
}

/* The spawning threads: FLOOR_THREADS, else one per CPU online; at least 2. */
static long thread_count(void) {
    long threads = sysconf(_SC_NPROCESSORS_ONLN);
    const char *wanted = getenv("FLOOR_THREADS");
    if (wanted && *wanted)
        threads = strtol(wanted, NULL, 10);
    return threads < 2 ? 2 : threads;
}

static void threads_mode(long n, long j) {
    long threads = thread_count();
    t_n = n;
    t_j = j;
    const char *spin_us = getenv("FLOOR_SPIN_US");
    spin_ns = spin_us ? strtol(spin_us, NULL, 10) * 1000 : 0;
    pthread_t *ids = calloc((size_t)threads, sizeof *ids);
    if (!ids)
        die("calloc");
    for (long i = 0; i < threads; i++)
        if (pthread_create(&ids[i], NULL, threads_worker, NULL) != 0)
            die("pthread_create");
    for (long i = 0; i < threads; i++)
        pthread_join(ids[i], NULL);
    failures += atomic_load(&t_failures);
    free(ids);
}

static int write_all(const char *buf, size_t len) {
    while (len > 0) {
        ssize_t w = write(STDOUT_FILENO, buf, len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        buf += w;
        len -= (size_t)w;
    }
    return 0;
}

/* capture mode, also one share of threads-capture mode: returns the children that failed. */
static int capture_loop(long n, long j) {
    struct pollfd *fds = calloc((size_t)j, sizeof *fds);
    pid_t *pids = calloc((size_t)j, sizeof *pids);
    char *buf = malloc(64 * 1024);
    int failed = 0;
    if (!fds || !pids || !buf)
        die("calloc");
    long started = 0, running = 0;
    for (long i = 0; i < j; i++)
        fds[i].fd = -1;
    while (started < n || running > 0) {
        for (long i = 0; i < j && started < n; i++) {
            if (fds[i].fd >= 0)
                continue;
            int p[2];
            if (pipe2(p, O_CLOEXEC) != 0)
                die("pipe2");
            pids[i] = start(p[1], p[0]);
            close(p[1]);
            fds[i].fd = p[0];
            fds[i].events = POLLIN;
            started++;
            running++;
        }
        if (poll(fds, (nfds_t)j, -1) < 0) {
            if (errno == EINTR)
                continue;
            die("poll");
        }
        for (long i = 0; i < j; i++) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            ssize_t r = read(fds[i].fd, buf, 64 * 1024);
            if (r > 0) {
                if (write_all(buf, (size_t)r) != 0)
                    die("write");
                continue;
            }
            if (r < 0 && (errno == EINTR || errno == EAGAIN))
                continue;
            /* EOF: the child closed its stdout; reap it. */
            close(fds[i].fd);
            fds[i].fd = -1;
            int status;
            while (waitpid(pids[i], &status, 0) < 0)
                if (errno != EINTR)
                    die("waitpid");
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                failed++;
            running--;
        }
    }
    free(fds);
    free(pids);
    free(buf);
    return failed;
}

static void capture_mode(long n, long j) { failures += capture_loop(n, j); }

/* threads-capture mode: each thread runs capture_loop over its share of N and J. */
struct share {
    long n, j;
    int failed;
};

static void *capture_worker(void *arg) {
    struct share *share = arg;
    share->failed = capture_loop(share->n, share->j);
    return NULL;
}

static void threads_capture_mode(long n, long j) {
    long threads = thread_count();
    if (threads > j)
        threads = j;
    pthread_t *ids = calloc((size_t)threads, sizeof *ids);
    struct share *shares = calloc((size_t)threads, sizeof *shares);
    if (!ids || !shares)
        die("calloc");
    for (long i = 0; i < threads; i++) {
        shares[i].n = n / threads + (i < n % threads);
        shares[i].j = j / threads + (i < j % threads);
        if (pthread_create(&ids[i], NULL, capture_worker, &shares[i]) != 0)
            die("pthread_create");
    }
    for (long i = 0; i < threads; i++) {
        pthread_join(ids[i], NULL);
        failures += shares[i].failed;
    }
    free(ids);
    free(shares);
}

int main(int argc, char **argv) {
    if (argc < 4 || argc > 5 ||
        (strcmp(argv[1], "run") != 0 && strcmp(argv[1], "threads") != 0 &&
         strcmp(argv[1], "capture") != 0 && strcmp(argv[1], "threads-capture") != 0)) {
        fprintf(stderr, "usage: %s run|threads|capture|threads-capture N J [COMMAND]\n",
                argv[0]);
        return 2;
    }
    long n = strtol(argv[2], NULL, 10);
    long j = strtol(argv[3], NULL, 10);
    if (n < 0 || j < 1) {
        fprintf(stderr, "%s: N must be >= 0 and J >= 1\n", argv[0]);
        return 2;
    }
    if (argc == 5)
        command = argv[4];
    if (strcmp(argv[1], "run") == 0)
        run_mode(n, j);
    else if (strcmp(argv[1], "threads") == 0)
        threads_mode(n, j);
    else if (strcmp(argv[1], "capture") == 0)
        capture_mode(n, j);
    else
        threads_capture_mode(n, j);
    return failures ? 1 : 0;
}
