/* loops_exits.c: loops left every way C allows, for the loop point tests: `break`, `return`
 * and `goto` out of a nest, `continue` (which stays in the loop), a do-while, a loop whose
 * header is the function's first block at -O2, a loop left by `longjmp` in the loop's own
 * function (a call to a non-returning function: an exit edge) and one left by a callee's
 * `longjmp` (no edge of the loop's function sees it); and a lone conditional branch for edge
 * points. Each function is called several times,
 * leaving its loop a different way each time.
 * Deterministic: always prints the same lines and exits 0. */
#include <setjmp.h>
#include <stdio.h>

#define NOINLINE __attribute__((noinline, noclone))

volatile int sink;
static jmp_buf back;

/* Left by `break` at i == stop, or by the test when stop >= n. */
NOINLINE int with_break(int n, int stop) {
    int i;
    for (i = 0; i < n; i++) {
        if (i == stop)
            break;
        sink = i;
    }
    return i;
}

/* Left by `return` from the body, or by the test. */
NOINLINE int with_return(int n, int stop) {
    for (int i = 0; i < n; i++) {
        if (i == stop)
            return -i;
        sink = i;
    }
    return n;
}

/* A nest left by `goto` from the inner loop, out of both loops at once. */
NOINLINE int with_goto(int n, int target) {
    int found = -1;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            if (i * n + j == target) {
                found = i * 100 + j;
                goto done;
            }
done:
    sink = found;
    return found;
}

/* `continue` goes to the next iteration: an edge inside the loop, never an exit. */
NOINLINE int with_continue(int n) {
    int total = 0;
    for (int i = 0; i < n; i++) {
        if (i % 3 == 0)
            continue;
        total += i;
        sink = total;
    }
    return total;
}

/* A do-while: the body runs before the first test. */
NOINLINE int do_while(unsigned v) {
    int steps = 0;
    do {
        v /= 2;
        steps++;
        sink = steps;
    } while (v > 1);
    return steps;
}

volatile unsigned state;

/* At -O2 the loop is the function's first instruction: the header is the entry block, and
 * its entry is the call itself. */
NOINLINE void header_first(void) {
    do {
        state = state * 1103515245u + 12345u;
    } while (state & 7);
}

/* Left by `longjmp` straight from the loop's body (a call that never returns), or by the
 * test. */
NOINLINE int jump_here(int n, int stop) {
    for (int i = 0; i < n; i++) {
        if (i == stop)
            longjmp(back, 1);
        sink = i;
    }
    return n;
}

NOINLINE void maybe_jump(int i, int stop) {
    if (i == stop)
        longjmp(back, 2);
    sink = i;
}

/* Left by `longjmp` from a callee, which no edge of this function shows, or by the test. */
NOINLINE int jump_in_callee(int n, int stop) {
    for (int i = 0; i < n; i++)
        maybe_jump(i, stop);
    return n;
}

volatile int negatives, others;

/* One conditional branch: its two edges are taken 3 and 5 times. */
NOINLINE void sign_split(int v) {
    if (v < 0)
        negatives++;
    else
        others++;
}

int main(void) {
    printf("break=%d %d\n", with_break(10, 3), with_break(10, 20));
    printf("return=%d %d\n", with_return(10, 4), with_return(10, 20));
    printf("goto=%d %d\n", with_goto(5, 12), with_goto(5, 99));
    printf("continue=%d %d\n", with_continue(10), with_continue(7));
    printf("do-while=%d %d\n", do_while(1), do_while(100));
    state = 1;
    header_first();
    unsigned first = state;
    state = 8;
    header_first();
    printf("header-first=%u %u\n", first, state);
    volatile int jumped = 0;
    if (setjmp(back) == 0)
        sink = jump_here(6, 20);
    if (setjmp(back) == 0)
        sink = jump_here(6, 2);
    else
        jumped++;
    if (setjmp(back) == 0)
        sink = jump_in_callee(6, 20);
    if (setjmp(back) == 0)
        sink = jump_in_callee(6, 3);
    else
        jumped++;
    printf("longjmp=%d\n", jumped);
    static const int values[] = {4, -1, 0, 7, -8, 3, -2, 9};
    for (unsigned k = 0; k < sizeof values / sizeof values[0]; k++)
        sign_split(values[k]);
    printf("signs=%d %d\n", negatives, others);
    return 0;
}
