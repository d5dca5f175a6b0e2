/* live.c: a mutatee for live-process control. It prints "ready", then N threads (argv[1],
 * default 1, the main thread included) spin on `counter` with short sleeps until someone
 * outside sets `stop` (gsh's tests write it through the tracer). Then it prints fixed lines,
 * so a test can check that halting, injecting and detaching changed nothing, and that
 * signals sent to it arrived (SIGUSR1 is counted). SIGUSR2 makes it dlopen libm and say so. With a second argument "shared" it first
 * maps what nginx keeps for its zones and a memfd: /proc/PID/maps then shows
 * `/dev/zero (deleted)` and `/memfd:live (deleted)`, which are not modules. With "churn" one
 * more thread creates and joins short-lived threads until `stop` (a thread pool's pattern).
 * Not in MUTATEES: run alone it never ends. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define NOINLINE __attribute__((noipa, used))
#define MAXTHREADS 16

volatile long counter;
volatile int stop;
volatile int usr1;
volatile int want_dlopen;

static void on_usr1(int sig) {
    (void)sig;
    usr1++;
}

/* SIGUSR2 asks for a dlopen, which passes the dynamic linker's debugger hook. */
static void on_usr2(int sig) {
    (void)sig;
    want_dlopen = 1;
}

NOINLINE long add3(long a, long b, long c) { return a + b * 10 + c * 100; }

NOINLINE void *spin(void *arg) {
    (void)arg;
    while (!stop) {
        __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED);
        if (want_dlopen && __atomic_exchange_n(&want_dlopen, 0, __ATOMIC_SEQ_CST)) {
            void *h = dlopen("libm.so.6", RTLD_NOW);
            printf("dlopen %s\n", h ? "ok" : dlerror());
            fflush(stdout);
        }
        usleep(200);
    }
    return NULL;
}

NOINLINE void *nothing(void *arg) { return arg; }

NOINLINE void *churn(void *arg) {
    (void)arg;
    while (!stop) {
        pthread_t t;
        if (pthread_create(&t, NULL, nothing, NULL) == 0)
            pthread_join(t, NULL);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1;
    if (n < 1 || n > MAXTHREADS)
        n = 1;
    signal(SIGUSR1, on_usr1);
    signal(SIGUSR2, on_usr2);
    if (argc > 2 && strcmp(argv[2], "shared") == 0) {
        char *zone = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        int fd = memfd_create("live", 0);
        if (zone == MAP_FAILED || fd < 0 || ftruncate(fd, 4096) != 0 ||
            mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0) == MAP_FAILED) {
            perror("shared mappings");
            return 1;
        }
        zone[0] = 1;
    }
    pthread_t threads[MAXTHREADS];
    pthread_t churner;
    int churning = argc > 2 && strcmp(argv[2], "churn") == 0;
    if (churning && pthread_create(&churner, NULL, churn, NULL) != 0) {
        perror("pthread_create");
        return 1;
    }
    for (int i = 1; i < n; i++)
        if (pthread_create(&threads[i], NULL, spin, NULL) != 0) {
            perror("pthread_create");
            return 1;
        }
    printf("ready\n");
    fflush(stdout);
    spin(NULL);
    for (int i = 1; i < n; i++)
        pthread_join(threads[i], NULL);
    if (churning)
        pthread_join(churner, NULL);
    printf("%d threads stopped\n", n);
    printf("add3(1, 2, 3) = %ld\n", add3(1, 2, 3));
    if (usr1)
        printf("SIGUSR1 x %d\n", usr1);
    return 0;
}
