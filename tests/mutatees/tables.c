/* Jump-table edges into blocks with several ways in (issue 16): `step`'s switch has cases
 * that fall into the next case's block, and a hole in the table that leads to the default the
 * guard reaches too, so most of the table's edges enter a block other edges reach. The program
 * counts how often it dispatches each value itself and prints the counts: the reference the
 * test holds gsh's edge counters to, through the table's entries. */
#include <stdio.h>

#define OPS 11

static long counts[OPS];

__attribute__((noinline)) long step(int op, long a)
{
    switch (op) {
    case 0:
        a += 3;
        /* fall through */
    case 1:
        a *= 2;
        break;
    case 2:
        a -= 7;
        /* fall through */
    case 3:
        a ^= 0x55;
        break;
    case 4:
        a += 11;
        /* fall through */
    case 5:
        a = a / 3 + 1;
        break;
    case 6:
        a = ~a;
        break;
    case 7:
        a += 100;
        /* fall through */
    case 9:
        a -= 5;
        /* fall through */
    default:
        a -= 1;
        break;
    }
    return a;
}

int main(void)
{
    long a = 1;
    unsigned x = 12345;
    for (int i = 0; i < 5000; i++) {
        x = x * 1103515245u + 12345u;
        int op = (int)((x >> 16) % OPS);
        counts[op]++;
        a = step(op, a);
        a &= 0xffffff;
    }
    for (int k = 0; k < OPS; k++)
        printf("op %d: %ld\n", k, counts[k]);
    printf("a = %ld\n", a);
    return 0;
}
