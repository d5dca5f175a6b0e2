/* profhits.c: call paths entered many times in a row, so that `profile`'s inline path (the
 * thread's walk memo) serves most entries, beside every case where it must not:
 * - tick() is called 100 times a round from path_a's loop and from path_b's, round after
 *   round (the two frames lie at the same addresses, so only the return address on the stack
 *   tells the paths apart), and from path_b under path_c and under path_d (they differ only
 *   two frames up); 30 rounds: main > path_a 3000, main > path_b 3000, main > path_c > path_b
 *   3000, main > path_d > path_b 3000;
 * - rec(3) calls rec(n - 1) twice, 100 times from main: 100, 200, 400 and 800 activations
 *   at depths 1 to 4 (the second call of a pair enters where the first did);
 * - hop() leaves by longjmp 199 times of 200 (each abandoned frame is found at the next
 *   entry, at the same stack pointer);
 * - four threads call tick() 20000 times each from worker;
 * - nap(2) sleeps 2 ms, 20 times from main: 40 ms;
 * - a 200 us interval timer's SIGALRM handler calls tick() while spin() calls it in a loop,
 *   until 300 signals were handled: the handler's profiled entries interrupt the inline
 *   path's checks. The counts of those two are printed (they depend on timing).
 * Prints the same first line every run and exits 0. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <sys/time.h>
#include <time.h>

#define NOINLINE __attribute__((noinline, noclone))
#define NTHREADS 4

static __thread volatile long ticks;
static volatile long recs;
static volatile long alarms, spun;
static jmp_buf env;
/* Written after a call so that gcc -O2 keeps it a call, not a jump (a sibling call). */
static volatile int after;

NOINLINE void tick(void) { ticks++; }

NOINLINE void path_a(void) {
    for (int i = 0; i < 100; i++)
        tick();
}

NOINLINE void path_b(void) {
    for (int i = 0; i < 100; i++)
        tick();
}

NOINLINE void path_c(void) {
    path_b();
    after = 1;
}

NOINLINE void path_d(void) {
    path_b();
    after = 2;
}

NOINLINE void rec(int n) {
    recs++;
    if (n > 0) {
        rec(n - 1);
        rec(n - 1);
        recs++;
    }
}

NOINLINE void hop(int jump) {
    if (jump)
        longjmp(env, 1);
}

NOINLINE void nap(int ms) {
    struct timespec t = {0, (long)ms * 1000000L};
    while (nanosleep(&t, &t) != 0) {
    }
}

NOINLINE void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < 20000; i++)
        tick();
    return NULL;
}

NOINLINE void on_alarm(int sig) {
    (void)sig;
    alarms++;
    tick();
    after = 3;
}

NOINLINE void spin(void) {
    for (int i = 0; i < 1000; i++) {
        tick();
        spun++;
    }
}

int main(void) {
    for (int round = 0; round < 30; round++) {
        path_a();
        path_b();
        path_c();
        path_d();
    }
    for (int i = 0; i < 100; i++)
        rec(3);
    volatile int jumps = 0;
    for (int i = 0; i < 200; i++) {
        if (setjmp(env) == 0)
            hop(i < 199);
        else
            jumps++;
    }
    pthread_t threads[NTHREADS];
    for (long i = 0; i < NTHREADS; i++)
        if (pthread_create(&threads[i], NULL, worker, (void *)i) != 0) {
            perror("pthread_create");
            return 1;
        }
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(threads[i], NULL);
    for (int i = 0; i < 20; i++)
        nap(2);
    printf("ticks=%ld recs=%ld jumps=%d\n", ticks, recs, jumps);
    struct sigaction sa = {0};
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval every = {{0, 200}, {0, 200}};
    setitimer(ITIMER_REAL, &every, NULL);
    while (alarms < 300)
        spin();
    /* No handler runs once the signal is blocked: every handled signal is counted. */
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGALRM);
    sigprocmask(SIG_BLOCK, &block, NULL);
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    printf("alarms=%ld spun=%ld\n", alarms, spun);
    return 0;
}
