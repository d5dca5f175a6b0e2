// loopthrow.cpp: loops left by C++ exceptions, for loop timers (`time FUNC loop LOOP`):
// `throws_out`'s loop is left by an exception its caller catches, `catches_in`'s by one it
// catches itself outside the loop (control reaches its landing pad from inside the loop).
// After the loops main sleeps 200 ms, so a loop timer left open would show it.
// Deterministic: always prints the same lines and exits 0.
#include <cstdio>
#include <stdexcept>
#include <time.h>

#define NOINLINE __attribute__((noinline, noclone))

volatile int sink;

NOINLINE void throw_at(int i, int at) {
    if (i == at)
        throw std::runtime_error("out");
    sink = i;
}

// Left by an exception (caught by main) when i reaches at, if at < n.
NOINLINE int throws_out(int n, int at) {
    int s = 0;
    for (int i = 0; i < n; i++) {
        throw_at(i, at);
        s += i;
    }
    return s;
}

// Left for its own handler when i reaches at, if at < n.
NOINLINE int catches_in(int n, int at) {
    int s = 0;
    try {
        for (int i = 0; i < n; i++) {
            throw_at(i, at);
            s += i;
        }
    } catch (const std::runtime_error &) {
        s = -s;
    }
    return s;
}

int main() {
    // 4 entries: left by an exception twice, then two that run out.
    static const int runs[][2] = {{5, 2}, {4, 1}, {3, 9}, {2, 9}};
    int total = 0;
    for (const auto &r : runs) {
        try {
            total += throws_out(r[0], r[1]);
        } catch (const std::runtime_error &) {
            total += 100;
        }
    }
    std::printf("throws_out=%d\n", total);
    // 3 entries: one that runs out, then two left for the handler (the last one too: its
    // timer closes in the handler or stays open through the sleep).
    int a = catches_in(3, 9);
    int b = catches_in(4, 0);
    int c = catches_in(6, 3);
    std::printf("catches_in=%d %d %d\n", a, b, c);
    struct timespec nap = {0, 200 * 1000 * 1000};
    nanosleep(&nap, nullptr);
    return 0;
}
