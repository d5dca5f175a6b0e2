/* recursion.c: plain, nested and mutual recursion, whose call counts are known exactly:
 * fib(15) makes 1973 calls of fib, ackermann(2, 3) counts its own calls, and even(10) plus
 * odd(7) make 19 calls of the pair.
 * Deterministic: always prints the same lines and exits 0. */
#include <stdio.h>

#define NOINLINE __attribute__((noinline, noclone))

static long ack_calls;

NOINLINE int fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

NOINLINE int ackermann(int m, int n) {
    ack_calls++;
    if (m == 0)
        return n + 1;
    if (n == 0)
        return ackermann(m - 1, 1);
    return ackermann(m - 1, ackermann(m, n - 1));
}

NOINLINE int odd(int n);
NOINLINE int even(int n) { return n == 0 ? 1 : odd(n - 1); }
NOINLINE int odd(int n) { return n == 0 ? 0 : even(n - 1); }

int main(void) {
    printf("fib=%d\n", fib(15));
    int a = ackermann(2, 3);
    printf("ackermann=%d calls=%ld\n", a, ack_calls);
    printf("even=%d odd=%d\n", even(10), odd(7));
    return 0;
}
