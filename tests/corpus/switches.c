/* Switches of every shape gcc and clang emit jump tables for: gsh's jump-table tests and the
   ground truth (`cargo run -p xtask -- ground-truth`) compile it. */
volatile int sink;
__attribute__((noinline)) int f(int k) { sink = k; return k * 3 + 1; }

/* Biased by 'a': `sub eax, 0x61` (or `lea eax, [rdi-0x61]`) before the compare. */
__attribute__((noinline)) int letters(int c) {
    switch (c) {
    case 'a': return f(1);  case 'c': return f(2);  case 'd': return f(3);
    case 'f': return f(4);  case 'h': return f(5);  case 'k': return f(6);
    case 'm': return f(7);  case 'p': return f(8);  case 's': return f(9);
    case 'x': return f(10); default: return -1;
    }
}

/* A large bias. */
__attribute__((noinline)) int big(int c) {
    switch (c) {
    case 1000: return f(11); case 1001: return f(12); case 1002: return f(13);
    case 1003: return f(14); case 1005: return f(15); case 1006: return f(16);
    case 1008: return f(17); case 1011: return f(18); default: return 0;
    }
}

/* Negative cases: the bias is added. */
__attribute__((noinline)) int negative(int c) {
    switch (c) {
    case -6: return f(21); case -5: return f(22); case -3: return f(23);
    case -1: return f(24); case 0: return f(25);  case 2: return f(26);
    case 4: return f(27);  case 5: return f(28);  default: return 7;
    }
}

/* Every value of a masked index has a case: no compare at all. */
__attribute__((noinline)) int masked(unsigned x) {
    switch (x & 7) {
    case 0: return f(31); case 1: return f(32); case 2: return f(33); case 3: return f(34);
    case 4: return f(35); case 5: return f(36); case 6: return f(37); default: return f(38);
    }
}

/* A 64-bit index with a bias. */
__attribute__((noinline)) long wide(long c) {
    switch (c) {
    case 100: return f(41); case 101: return f(42); case 103: return f(43);
    case 104: return f(44); case 106: return f(45); case 109: return f(46);
    case 110: return f(47); default: return 3;
    }
}

/* A character from memory, in a loop that calls out between switches: the table's base can
   wait in a callee-saved register across the calls. */
__attribute__((noinline)) int next(const char **p) { return **p ? *(*p)++ : -1; }
__attribute__((noinline)) int options(const char *s) {
    int c, n = 0;
    while ((c = next(&s)) != -1) {
        switch (c) {
        case '+': n += f(51); break; case '-': n -= f(52); break;
        case '0': n ^= f(53); break; case '9': n |= f(54); break;
        case '=': n += f(55) * 2; break; case '@': n -= f(56) * 3; break;
        case 'Z': n = f(n); break; default: n++; break;
        }
    }
    return n;
}

int main(int argc, char **argv) {
    (void)argv;
    return letters(argc + 96) + big(argc + 999) + negative(argc - 3) + masked(argc)
        + (int)wide(argc + 99) + options("+-09=@Zq");
}
