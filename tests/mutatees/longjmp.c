/* longjmp.c: activations left by longjmp. `middle` calls `thrower`, which longjmps back to
 * main for every third value: `middle`'s return never happens for those activations, so exit
 * instrumentation must not fire for them (and must not break the jump). `thrower`'s call to
 * longjmp is itself an exit (a call to a non-returning function).
 * Deterministic: always prints the same lines and exits 0. */
#include <setjmp.h>
#include <stdio.h>

#define NOINLINE __attribute__((noinline, noclone))

static jmp_buf back;
volatile int side;

NOINLINE int thrower(int i) {
    if (i % 3 == 0)
        longjmp(back, i + 100);
    side = i;
    return i * 2;
}

NOINLINE int middle(int i) {
    int r = thrower(i);
    side = r;
    return r + 1;
}

int main(void) {
    volatile int returned = 0, jumped = 0, sum = 0;
    for (volatile int i = 0; i < 10; i++) {
        int code = setjmp(back);
        if (code == 0) {
            sum += middle(i);
            returned++;
        } else {
            sum += code;
            jumped++;
        }
    }
    printf("returned=%d jumped=%d sum=%d\n", returned, jumped, sum);
    return 0;
}
