/* profloops.c: call paths through loops, for `profile` with loop measures. `grid` calls
 * `helper` in an outer loop, in the loop nested in it and in a sibling loop after them;
 * `twice` calls `grid` from a loop of its own; main calls `helper` once more directly.
 * Trip counts come from main's arguments through noinline, noclone functions, so no loop is
 * unrolled away. Deterministic: always prints the same line and exits 0. */
#include <stdio.h>

#define NOINLINE __attribute__((noinline, noclone))

volatile int sink;

NOINLINE int helper(int x) {
    sink = x;
    return x + 1;
}

/* An outer loop (rows calls), a loop nested in it (rows * cols calls), a sibling (tail). */
NOINLINE int grid(int rows, int cols, int tail) {
    int s = 0;
    for (int i = 0; i < rows; i++) {
        s += helper(i);
        for (int j = 0; j < cols; j++)
            s += helper(j);
    }
    for (int k = 0; k < tail; k++)
        s += helper(k);
    return s;
}

NOINLINE int twice(int n) {
    int s = 0;
    for (int r = 0; r < n; r++)
        s += grid(4, 5, 3);
    return s;
}

int main(void) {
    int s = twice(2);
    s += helper(100);
    printf("profloops=%d\n", s);
    return 0;
}
