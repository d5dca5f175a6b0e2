/* loopmeasure.c: loops left every way C allows, for loop measures (`count FUNC loop LOOP`,
 * `time FUNC loop LOOP`): a nest three deep, a loop left by break, by return, by goto, one
 * with continue, a do-while, loops that call functions, a loop left by longjmp, and a loop
 * whose header is its function's first instruction (hand-written, so no compiler moves it).
 * Every trip count is fixed by the arguments main passes; no function is called with a count
 * of zero (a rotated -O2 loop behind its guard would then not be entered at all).
 * After the loops main sleeps 200 ms, so a loop timer left open would show it.
 * Deterministic: always prints the same lines and exits 0. */
#include <setjmp.h>
#include <stdio.h>
#include <time.h>

/* noclone too: an IPA clone (`f.constprop.0`) would hide the name tests look for. */
#define NOINLINE __attribute__((noinline, noclone))

volatile int sink;

NOINLINE int leaf(int x) {
    sink = x;
    return x + 1;
}

/* loop_1 > loop_1.1 > loop_1.1.1 */
NOINLINE long nest3(int a, int b, int c) {
    long t = 0;
    for (int i = 0; i < a; i++)
        for (int j = 0; j < b; j++)
            for (int k = 0; k < c; k++)
                t += (long)i * j + k;
    return t;
}

/* Left by break when i reaches stop (stop < n), with a call in the body. */
NOINLINE int until_break(int n, int stop) {
    int acc = 0;
    for (int i = 0; i < n; i++) {
        if (i == stop)
            break;
        acc += leaf(i);
    }
    return acc;
}

/* Left by return from inside the body when want is found. */
NOINLINE int find_first(const int *v, int n, int want) {
    for (int i = 0; i < n; i++) {
        if (v[i] == want)
            return i;
        sink = v[i];
    }
    return -1;
}

/* Left by goto once the sum passes stop. */
NOINLINE int with_goto(int n, int stop) {
    int acc = 0;
    for (int i = 0; i < n; i++) {
        acc += i;
        sink = acc;
        if (acc > stop)
            goto out;
    }
    acc = -acc;
out:
    sink = acc;
    return acc;
}

/* continue on odd i; calls on even i. */
NOINLINE int even_sum(int n) {
    int s = 0;
    for (int i = 0; i < n; i++) {
        if (i & 1)
            continue;
        s += leaf(i);
    }
    return s;
}

/* do-while: its body runs before its test. */
NOINLINE int digits(unsigned v) {
    int d = 0;
    do {
        d++;
        v /= 10;
        sink = (int)v;
    } while (v);
    return d;
}

static jmp_buf back;

NOINLINE void jump_at(int i, int at) {
    if (i == at)
        longjmp(back, 1);
    sink = i;
}

/* Left by longjmp (through jump_at) when i reaches at, if at < n. */
NOINLINE int jumpy(int n, int at) {
    int s = 0;
    for (int i = 0; i < n; i++) {
        jump_at(i, at);
        s += i;
    }
    return s;
}

/* countdown(n): `dec edi; jnz countdown; ret`, so its loop's header is its first block. */
int countdown(int n);
__asm__(".text\n"
        ".globl countdown\n"
        ".type countdown, @function\n"
        "countdown:\n"
        "  subl $1, %edi\n"
        "  jnz countdown\n"
        "  xorl %eax, %eax\n"
        "  ret\n"
        ".size countdown, .-countdown\n");

/* called_into(n): a call returns straight into the loop's header, which its back edge also
 * reaches, so the entry edge (the call's return) has no place of its own for code. */
int called_into(int n);
__asm__(".text\n"
        ".globl called_into\n"
        ".type called_into, @function\n"
        "called_into:\n"
        "  pushq %rbx\n"
        "  movl %edi, %ebx\n"
        "  call leaf\n"
        "1:\n"
        "  subl $1, %ebx\n"
        "  jnz 1b\n"
        "  popq %rbx\n"
        "  ret\n"
        ".size called_into, .-called_into\n");

int main(void) {
    static const int v[] = {4, 8, 15, 16, 23, 42};
    /* One call per statement: the order of a call's arguments is the compiler's. */
    long n3 = nest3(2, 3, 4);
    printf("nest3=%ld\n", n3);
    int a = until_break(10, 4); /* breaks at i == 4 */
    int b = until_break(3, 7);  /* runs out */
    printf("until_break=%d %d\n", a, b);
    a = find_first(v, 6, 15); /* returns at i == 2 */
    b = find_first(v, 6, 99); /* runs out */
    printf("find_first=%d %d\n", a, b);
    a = with_goto(10, 12); /* leaves at i == 5 (0+1+2+3+4+5 > 12) */
    b = with_goto(4, 100); /* runs out */
    printf("with_goto=%d %d\n", a, b);
    a = even_sum(9);
    printf("even_sum=%d\n", a);
    a = digits(7);
    b = digits(12345);
    printf("digits=%d %d\n", a, b);
    int done = 0;
    /* 5 entries: left by longjmp at i == 2 twice, then three that run out. */
    static const int runs[][2] = {{5, 2}, {4, 2}, {3, 9}, {6, 9}, {2, 9}};
    for (volatile int r = 0; r < 5; r++) {
        if (setjmp(back) == 0)
            done += jumpy(runs[r][0], runs[r][1]);
        else
            done += 100;
    }
    printf("jumpy=%d\n", done);
    printf("countdown=%d\n", countdown(5));
    printf("called_into=%d\n", called_into(5));
    struct timespec nap = {0, 200 * 1000 * 1000};
    nanosleep(&nap, NULL);
    return 0;
}
