/* Block coverage mutatee: branches, loops, a switch, early returns and a function that never
 * runs, driven by the first argument, so that gsh's `coverage` and gcov (the same source built
 * with `--coverage`) can be compared line by line. Built at -O0 by tests/it/coverage.rs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int classify(int c)
{
    if (c >= '0' && c <= '9')
        return 1;
    if (c >= 'a' && c <= 'z') {
        return 2;
    }
    return 0;
}

/* Exactly four blocks at -O0: entry (compare), the odd arm, the even arm, the join. */
int parity(int n)
{
    int r;
    if (n % 2)
        r = 1;
    else
        r = 0;
    return r;
}

static int weigh(const char *s)
{
    int total = 0;
    for (size_t i = 0; s[i]; i++) {
        switch (classify(s[i])) {
        case 1:
            total += s[i] - '0';
            break;
        case 2:
            total += 100;
            break;
        default:
            total -= 1;
            break;
        }
    }
    return total;
}

static int never_called(int x)
{
    int y = x * 3;
    if (y > 10)
        y -= 10;
    return y;
}

static int count_down(int n)
{
    int steps = 0;
    while (n > 0) {
        if (n > 100)
            n /= 2;
        else
            n--;
        steps++;
    }
    return steps;
}

int main(int argc, char **argv)
{
    const char *word = argc > 1 ? argv[1] : "abc123";
    int w = weigh(word);
    int odd = 0;
    for (int i = 0; i < 7; i++)
        odd += parity(i);
    if (argc > 2) {
        printf("never %d\n", never_called(w));
        return 3;
    }
    int steps = count_down(w);
    int tail = parity(w) + parity(steps);
    printf("weight %d odd %d steps %d tail %d\n", w, odd, steps, tail);
    if (strlen(word) > 100)
        abort();
    return 0;
}
