/* timing.c: functions whose inclusive times and call paths are known, for `time` and
 * `profile`:
 * - nap(ms) sleeps ms milliseconds: called with 10, 20 and 30 (60 ms in all);
 * - descend(5) recurses 5 levels and sleeps 20 ms at the bottom (6 calls, 20 ms inclusive,
 *   timed once for the outermost activation);
 * - jumper(10) sleeps 10 ms and leaves by longjmp three times, then once returns normally
 *   (4 calls, about 40 ms: each abandoned activation is closed at the next entry);
 * - leaf() is reached along three call paths: main > path_a (2 calls), main > path_b (3),
 *   main > path_c > path_b (4);
 * - after the measured work main sleeps 100 ms, which no timer may count.
 * Deterministic: always prints the same lines and exits 0. */
#include <setjmp.h>
#include <stdio.h>
#include <time.h>

#define NOINLINE __attribute__((noinline, noclone))

static jmp_buf env;
static volatile long leaves;

NOINLINE void nap(int ms) {
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0) {
    }
}

NOINLINE int descend(int n) {
    if (n == 0) {
        nap(20);
        return 0;
    }
    return descend(n - 1) + 1;
}

NOINLINE void jumper(int ms, int jump) {
    nap(ms);
    if (jump)
        longjmp(env, 1);
}

NOINLINE void leaf(void) { leaves++; }

NOINLINE void path_a(void) {
    leaf();
    leaf();
}

NOINLINE void path_b(void) { leaf(); }

NOINLINE void path_c(void) { path_b(); }

int main(void) {
    nap(10);
    nap(20);
    nap(30);
    printf("descend=%d\n", descend(5));
    volatile int jumps = 0;
    for (int i = 0; i < 4; i++) {
        if (setjmp(env) == 0)
            jumper(10, i < 3);
        else
            jumps++;
    }
    printf("jumps=%d\n", jumps);
    path_a();
    for (int i = 0; i < 3; i++)
        path_b();
    for (int i = 0; i < 4; i++)
        path_c();
    printf("leaves=%ld\n", leaves);
    struct timespec t = {0, 100000000L};
    nanosleep(&t, 0);
    return 0;
}
