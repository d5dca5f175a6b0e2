/* loops.c: loop shapes for loop-tree and point tests: a nest three deep, a while loop, sibling
 * loops, a loop calling functions, and a switch with a dozen cases (a jump table at -O2).
 * Deterministic: always prints the same lines and exits 0. */
#include <stdio.h>

/* noclone too: an IPA clone (`f.constprop.0`) would hide the name tests look for. */
#define NOINLINE __attribute__((noinline, noclone))

volatile int sink;

NOINLINE int square(int x) { return x * x; }

/* Twelve cases doing different work, so gcc emits an indirect jump through a jump table
 * rather than turning the switch into a lookup array. */
NOINLINE int classify(int v) {
    int r;
    switch (v % 12) {
    case 0: r = square(v); break;
    case 1: r = v + 23; break;
    case 2: r = v * 37; break;
    case 3: r = v ^ 41; break;
    case 4: r = v - 53; break;
    case 5: r = square(v) + 67; break;
    case 6: r = v << 3; break;
    case 7: r = v / 3 + 83; break;
    case 8: r = v % 5 + 97; break;
    case 9: r = -v; break;
    case 10: r = v | 113; break;
    case 11: r = v & 127; break;
    default: r = -1; break;
    }
    sink = r;
    return r;
}

/* loop_1 with loop_1.1 inside, and loop_1.1.1 inside that. */
NOINLINE long nested(int n) {
    long total = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            for (int k = 0; k < n; k++)
                total += (long)i * j + k;
    return total;
}

NOINLINE int collatz_steps(unsigned int v) {
    int steps = 0;
    while (v != 1) {
        v = (v & 1) ? 3 * v + 1 : v / 2;
        steps++;
    }
    return steps;
}

/* Two loops side by side: loop_1 and loop_2. */
NOINLINE int siblings(int n) {
    int a = 0, b = 0;
    for (int i = 0; i < n; i++)
        a += i;
    for (int i = n; i > 0; i--)
        b += i * 2;
    return a + b;
}

NOINLINE int calls_in_loop(int n) {
    int total = 0;
    for (int i = 0; i < n; i++) {
        total += square(i);
        total += classify(i);
        sink = total;
    }
    return total;
}

int main(void) {
    printf("nested=%ld\n", nested(6));
    printf("collatz=%d\n", collatz_steps(27));
    printf("siblings=%d\n", siblings(10));
    printf("calls=%d\n", calls_in_loop(24));
    return 0;
}
