/* planted.c: programs with one planted bottleneck each, for the automated search (`consult`).
 * `planted MODE [SECONDS]` runs for SECONDS (default 10), then prints one fixed line:
 *   cpu    the main thread computes in `crunch` (the decoy `decoy` costs a twentieth of it);
 *   lock   three threads take turns holding `hot_lock` in `contend` while computing, so each
 *          waits for it most of the time; `cold_lock` nearby is taken by one thread only;
 *   smallio `log_small` writes 16 bytes at a time to a file;
 *   pipe   a thread blocks reading a pipe in `drain`, fed a byte every 50 ms by main;
 *   poll   main waits in poll() on a pipe in `await_input`, fed a byte every 50 ms by `feed`
 *          (a thread that sleeps between bytes);
 *   epoll  main waits in epoll_wait() in `await_events` on an instance watching a listening
 *          TCP socket on 127.0.0.1 and three pipes, fed a byte every 50 ms by `feed_events`
 *          (on each pipe in turn); on stderr at the end, how many of its waits returned EINTR;
 *   runq   three threads per CPU spin in `spin`: each waits for a CPU most of the time;
 *   idle   main computes in `crunch` while five threads sleep throughout: two wait
 *          in `wait_lock` to take `held_lock`, which main holds until the end ("waiter"), one
 *          reads in `listen_pipe` a pipe written only at the end ("listener"), two wait in
 *          `park` for a condition signalled at the end ("parked"); each names itself (the
 *          quoted names) so that tests can find it in /proc.
 * Not in MUTATEES: it runs for seconds. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noipa, used))

static double seconds = 10.0;
static double end;
volatile unsigned long sink;
pthread_mutex_t hot_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t cold_lock = PTHREAD_MUTEX_INITIALIZER;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

NOINLINE unsigned long work(unsigned long n) {
    unsigned long x = n;
    for (unsigned long i = 0; i < n; i++)
        x = x * 6364136223846793005UL + 1442695040888963407UL;
    return x;
}

NOINLINE void crunch(void) { sink += work(2000000); }

NOINLINE void decoy(void) { sink += work(100000); }

static void run_cpu(void) {
    while (now() < end) {
        crunch();
        decoy();
    }
}

NOINLINE void contend(void) {
    pthread_mutex_lock(&hot_lock);
    sink += work(400000);
    pthread_mutex_unlock(&hot_lock);
}

NOINLINE void tidy(void) {
    pthread_mutex_lock(&cold_lock);
    sink += 1;
    pthread_mutex_unlock(&cold_lock);
}

NOINLINE void *locker(void *arg) {
    while (now() < end) {
        contend();
        if (arg)
            tidy();
    }
    return NULL;
}

static void run_lock(void) {
    pthread_t t[3];
    for (long i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, locker, (void *)(long)(i == 0));
    for (long i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
}

NOINLINE void log_small(int fd, unsigned long i) {
    char line[16];
    memset(line, 'x', sizeof line);
    if (pwrite(fd, line, sizeof line, (off_t)(i % 4096) * sizeof line) < 0)
        exit(1);
}

static void run_smallio(void) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/gsh-planted-%d.log", (int)getpid());
    int fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0600);
    if (fd < 0)
        exit(1);
    unlink(path);
    for (unsigned long i = 0; now() < end; i++)
        log_small(fd, i);
    close(fd);
}

static int pipe_fds[2];

NOINLINE void *drain(void *arg) {
    (void)arg;
    char c;
    while (read(pipe_fds[0], &c, 1) == 1 && c != 'q')
        ;
    return NULL;
}

static void run_pipe(void) {
    if (pipe(pipe_fds) != 0)
        exit(1);
    pthread_t t;
    pthread_create(&t, NULL, drain, NULL);
    while (now() < end) {
        usleep(50000);
        if (write(pipe_fds[1], "x", 1) != 1)
            exit(1);
    }
    if (write(pipe_fds[1], "q", 1) != 1)
        exit(1);
    pthread_join(t, NULL);
}

static int poll_fds[2];

NOINLINE void *feed(void *arg) {
    (void)arg;
    while (now() < end) {
        usleep(50000);
        if (write(poll_fds[1], "x", 1) != 1)
            exit(1);
    }
    if (write(poll_fds[1], "q", 1) != 1)
        exit(1);
    return NULL;
}

NOINLINE void await_input(int fd) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    char c = 0;
    while (c != 'q') {
        if (poll(&p, 1, 1000) < 0)
            exit(1);
        if ((p.revents & POLLIN) && read(fd, &c, 1) != 1)
            exit(1);
    }
}

static void run_poll(void) {
    if (pipe(poll_fds) != 0)
        exit(1);
    pthread_t t;
    pthread_create(&t, NULL, feed, NULL);
    await_input(poll_fds[0]);
    pthread_join(t, NULL);
}

static int event_pipes[3][2];

NOINLINE void *feed_events(void *arg) {
    (void)arg;
    for (int i = 0; now() < end; i = (i + 1) % 3) {
        usleep(50000);
        if (write(event_pipes[i][1], "x", 1) != 1)
            exit(1);
    }
    if (write(event_pipes[0][1], "q", 1) != 1)
        exit(1);
    return NULL;
}

NOINLINE void await_events(int ep) {
    struct epoll_event ev[4];
    char c = 0;
    long interrupted = 0;
    while (c != 'q') {
        /* A stop (gsh's stack samples) ends an epoll_wait with EINTR, as servers expect. */
        int n = epoll_wait(ep, ev, 4, 1000);
        if (n < 0 && errno != EINTR)
            exit(1);
        interrupted += n < 0;
        for (int i = 0; i < n; i++)
            if (read(ev[i].data.fd, &c, 1) != 1)
                exit(1);
    }
    fprintf(stderr, "epoll_wait returned EINTR %ld times\n", interrupted);
}

static void run_epoll(void) {
    int ep = epoll_create1(0);
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (ep < 0 || listener < 0 || bind(listener, (struct sockaddr *)&a, sizeof a) != 0 ||
        listen(listener, 1) != 0)
        exit(1);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = listener};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, listener, &ev) != 0)
        exit(1);
    for (int i = 0; i < 3; i++) {
        if (pipe(event_pipes[i]) != 0)
            exit(1);
        ev.data.fd = event_pipes[i][0];
        if (epoll_ctl(ep, EPOLL_CTL_ADD, event_pipes[i][0], &ev) != 0)
            exit(1);
    }
    pthread_t t;
    pthread_create(&t, NULL, feed_events, NULL);
    await_events(ep);
    pthread_join(t, NULL);
}

NOINLINE void *spin(void *arg) {
    (void)arg;
    while (now() < end)
        sink += work(100000);
    return NULL;
}

static void run_runq(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN) * 3;
    if (n > 64)
        n = 64;
    pthread_t t[64];
    for (long i = 0; i < n; i++)
        pthread_create(&t[i], NULL, spin, NULL);
    for (long i = 0; i < n; i++)
        pthread_join(t[i], NULL);
}

pthread_mutex_t held_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t park_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t park_cond = PTHREAD_COND_INITIALIZER;
static int park_over;
static int idle_pipe[2];

NOINLINE void wait_lock(void) {
    pthread_mutex_lock(&held_lock);
    pthread_mutex_unlock(&held_lock);
}

NOINLINE void *lock_waiter(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "waiter");
    wait_lock();
    return NULL;
}

NOINLINE void listen_pipe(void) {
    char c;
    if (read(idle_pipe[0], &c, 1) != 1)
        exit(1);
}

NOINLINE void *listener(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "listener");
    listen_pipe();
    return NULL;
}

NOINLINE void park(void) {
    pthread_mutex_lock(&park_lock);
    while (!park_over)
        pthread_cond_wait(&park_cond, &park_lock);
    pthread_mutex_unlock(&park_lock);
}

NOINLINE void *parker(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "parked");
    park();
    return NULL;
}

static void run_idle(void) {
    void *(*starts[5])(void *) = {lock_waiter, lock_waiter, listener, parker, parker};
    pthread_t t[5];
    pthread_mutex_lock(&held_lock);
    if (pipe(idle_pipe) != 0)
        exit(1);
    for (int i = 0; i < 5; i++)
        pthread_create(&t[i], NULL, starts[i], NULL);
    /* Not run_cpu(): called from two places it is no longer inlined into main, and the `cpu`
     * searches name `main > crunch`. */
    while (now() < end)
        crunch();
    pthread_mutex_unlock(&held_lock);
    if (write(idle_pipe[1], "q", 1) != 1)
        exit(1);
    pthread_mutex_lock(&park_lock);
    park_over = 1;
    pthread_cond_broadcast(&park_cond);
    pthread_mutex_unlock(&park_lock);
    for (int i = 0; i < 5; i++)
        pthread_join(t[i], NULL);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: planted cpu|lock|smallio|pipe|poll|epoll|runq|idle [SECONDS]\n");
        return 2;
    }
    if (argc > 2)
        seconds = atof(argv[2]);
    end = now() + seconds;
    const char *m = argv[1];
    if (!strcmp(m, "cpu"))
        run_cpu();
    else if (!strcmp(m, "lock"))
        run_lock();
    else if (!strcmp(m, "smallio"))
        run_smallio();
    else if (!strcmp(m, "pipe"))
        run_pipe();
    else if (!strcmp(m, "poll"))
        run_poll();
    else if (!strcmp(m, "epoll"))
        run_epoll();
    else if (!strcmp(m, "runq"))
        run_runq();
    else if (!strcmp(m, "idle"))
        run_idle();
    else
        return 2;
    printf("planted %s done\n", m);
    return 0;
}
