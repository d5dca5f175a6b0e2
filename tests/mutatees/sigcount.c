/* sigcount.c: a mutatee that counts the signals it gets, for the tests that no signal sent to
 * a thread while gsh runs injected code in it (or lets it run on for its own ends) is lost or
 * delivered twice. It prints "ready", then its main thread allocates and frees (as
 * mallocloop.c does, so an injected function call waits for it to leave the allocator) until
 * someone outside sets `stop`. argv[1] more threads, started before "ready", each send the
 * process argv[2] SIGRTMIN (sigqueue, so none merges with another), 200 us apart, once
 * someone outside sets `go`. Setting `fault` makes the main
 * thread write into a page it cannot write: its SIGSEGV handler records the fault's si_code
 * and address and makes the page writable, and the write is done again. At the end it prints
 * what it got: SIGUSR1s, SIGRTMINs, the SIGRTMINs its threads sent, faults, the last fault's
 * si_code and its offset in the page. Words after argv[2]: "churn", the main thread also
 * creates and joins a thread at each turn (a thread stopped in `clone3` lends itself to
 * injections); "raise", it also raises SIGRTMIN at each turn (counted as sent), out of the
 * allocator (where a call waiting for it may run).
 * Not in MUTATEES: run alone it never ends. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define KEEP 64
#define MAXTHREADS 8

volatile int stop;
volatile int go;
volatile int fault;
volatile long usr1, rt, sent, faults;
volatile int fault_code;
volatile long fault_offset;
static char *page;
static long per_thread;

/* For the injected calls of the tests. */
__attribute__((noipa, used)) long twice(long x) { return 2 * x; }

static void on_signal(int sig) {
    if (sig == SIGUSR1)
        __atomic_fetch_add(&usr1, 1, __ATOMIC_RELAXED);
    else
        __atomic_fetch_add(&rt, 1, __ATOMIC_RELAXED);
}

static void on_segv(int sig, siginfo_t *info, void *uc) {
    (void)sig;
    (void)uc;
    char *at = info->si_addr;
    faults++;
    fault_code = info->si_code;
    fault_offset = at - page;
    if (at < page || at >= page + 4096 || mprotect(page, 4096, PROT_READ | PROT_WRITE) != 0)
        _exit(9);
}

static void *nothing(void *arg) { return arg; }

static void *sender(void *arg) {
    (void)arg;
    union sigval v = {0};
    while (!go)
        usleep(100);
    for (long i = 0; i < per_thread; i++) {
        if (sigqueue(getpid(), SIGRTMIN, v) == 0)
            __atomic_fetch_add(&sent, 1, __ATOMIC_RELAXED);
        usleep(200);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 0;
    if (n < 0 || n > MAXTHREADS)
        n = 0;
    per_thread = argc > 2 ? atol(argv[2]) : 0;
    int churn = 0, raising = 0;
    for (int a = 3; a < argc; a++) {
        churn |= strcmp(argv[a], "churn") == 0;
        raising |= strcmp(argv[a], "raise") == 0;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGRTMIN, &sa, NULL);
    sa.sa_handler = NULL;
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigaction(SIGSEGV, &sa, NULL);
    page = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED)
        return 3;
    pthread_t threads[MAXTHREADS];
    for (int i = 0; i < n; i++)
        if (pthread_create(&threads[i], NULL, sender, NULL) != 0)
            return 4;
    printf("ready\n");
    fflush(stdout);
    static unsigned char *keep[KEEP];
    unsigned long i = 0;
    while (!stop) {
        if (fault) {
            fault = 0;
            page[100] = 1;
        }
        unsigned k = (unsigned)((i * 2654435761u) % KEEP);
        free(keep[k]);
        unsigned size = 16 + (unsigned)((i * 40503u) % 3000);
        keep[k] = malloc(size);
        if (!keep[k])
            return 5;
        memset(keep[k], (int)k, size);
        if (raising && raise(SIGRTMIN) == 0)
            __atomic_fetch_add(&sent, 1, __ATOMIC_RELAXED);
        if (churn) {
            pthread_t t;
            if (pthread_create(&t, NULL, nothing, NULL) != 0)
                return 6;
            pthread_join(t, NULL);
        }
        i++;
    }
    for (int t = 0; t < n; t++)
        pthread_join(threads[t], NULL);
    printf("usr1 %ld rt %ld sent %ld faults %ld code %d offset %ld\n", usr1, rt, sent, faults,
           fault_code, fault_offset);
    return 0;
}
