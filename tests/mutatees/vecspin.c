/* vecspin.c: the main thread spins in assembly with sixteen known values in xmm0..xmm15 until
 * `stop` is set (by a debugger, or by a second thread when a byte arrives on stdin), then
 * counts how many changed. `clobber` zeroes them all. A debugger that injects a call (of
 * `clobber`, or of dlopen, whose string functions use vector registers) while the thread is
 * stopped in the spin must put its vector state back: "vectors kept". It must do so even when
 * the debugger dies during the call. */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

volatile int stop;

__attribute__((noinline)) void clobber(void) {
    __asm__ volatile("pxor %%xmm0, %%xmm0\n\t" "pxor %%xmm1, %%xmm1\n\t" "pxor %%xmm2, %%xmm2\n\t" "pxor %%xmm3, %%xmm3\n\t" "pxor %%xmm4, %%xmm4\n\t" "pxor %%xmm5, %%xmm5\n\t" "pxor %%xmm6, %%xmm6\n\t" "pxor %%xmm7, %%xmm7\n\t" "pxor %%xmm8, %%xmm8\n\t" "pxor %%xmm9, %%xmm9\n\t" "pxor %%xmm10, %%xmm10\n\t" "pxor %%xmm11, %%xmm11\n\t" "pxor %%xmm12, %%xmm12\n\t" "pxor %%xmm13, %%xmm13\n\t" "pxor %%xmm14, %%xmm14\n\t" "pxor %%xmm15, %%xmm15\n\t"
                     :
                     :
                     : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
}

int spin(volatile int *flag);
__asm__(".text\n"
        ".globl spin\n"
        ".type spin, @function\n"
        "spin:\n"
        "  movq $0x1111, %rax\n"
        "  movq %rax, %xmm0\n"
        "  movq $0x2222, %rax\n"
        "  movq %rax, %xmm1\n"
        "  movq $0x3333, %rax\n"
        "  movq %rax, %xmm2\n"
        "  movq $0x4444, %rax\n"
        "  movq %rax, %xmm3\n"
        "  movq $0x5555, %rax\n"
        "  movq %rax, %xmm4\n"
        "  movq $0x6666, %rax\n"
        "  movq %rax, %xmm5\n"
        "  movq $0x7777, %rax\n"
        "  movq %rax, %xmm6\n"
        "  movq $0x8888, %rax\n"
        "  movq %rax, %xmm7\n"
        "  movq $0x9999, %rax\n"
        "  movq %rax, %xmm8\n"
        "  movq $0xaaaa, %rax\n"
        "  movq %rax, %xmm9\n"
        "  movq $0xbbbb, %rax\n"
        "  movq %rax, %xmm10\n"
        "  movq $0xcccc, %rax\n"
        "  movq %rax, %xmm11\n"
        "  movq $0xdddd, %rax\n"
        "  movq %rax, %xmm12\n"
        "  movq $0xeeee, %rax\n"
        "  movq %rax, %xmm13\n"
        "  movq $0xffff, %rax\n"
        "  movq %rax, %xmm14\n"
        "  movq $0x11110, %rax\n"
        "  movq %rax, %xmm15\n"
        "1:\n"
        "  pause\n"
        "  cmpl $0, (%rdi)\n"
        "  je 1b\n"
        "  xorl %eax, %eax\n"
        "  xorl %edx, %edx\n"
        "  movq %xmm0, %rcx\n"
        "  cmpq $0x1111, %rcx\n"
        "  setne %dl\n"
        "  addl %edx, %eax\n"
        "  movq %xmm1, %rcx\n"
        "  cmpq $0x2222, %rcx\n"
        "  setne %dl\n"
        "  addl %edx, %eax\n"
        "  movq %xmm2, %rcx\n"
        "  cmpq $0x3333, %rcx\n"
        "  setne %dl\n"
        "  addl %edx, %eax\n"
        "  movq %xmm3, %rcx\n"
        "  cmpq $0x4444, %rcx\n"
        "  setne %dl\n"
        "  addl %edx, %eax\n"
        "  movq %xmm4, %rcx\n"
        "  cmpq $0x5555, %rcx\n"
        "  setne %dl\n"
        "  addl %edx, %eax\n"
        "  movq %xmm5, %rcx\n"
        "  cmpq $0x6666, %rcx\n"
        "  setne %dl\n"
        "  addl %edx, %eax\n"
        "  movq %xmm6, %rcx\n"
        "  cmpq $0x7777, %rcx\n"
        "  setne %dl\n"
        "  addl %edx, %eax\n"
        "  movq %xmm7, %rcx\n"
        "  cmpq $0x8888, %rcx\n"
        "  setne %dl\n"
        "  addl %edx, %eax\n"
        "  movq %xmm8, %rcx\n"
        "  cmpq $0x9999, %rcx\n"
        "  setne %dl\n"
        "  addl %edx, %eax\n"
        "  movq %xmm9, %rcx\n"
        "  cmpq $0xaaaa, %rcx\n"
        "  setne %dl\n"
        "  addl %edx, %eax\n"
        "  movq %xmm10, %rcx\n"
        "  cmpq $0xbbbb, %rcx\n"
        "  setne %dl\n"
        "  addl %edx, %eax\n"
        "  movq %xmm11, %rcx\n"
        "  cmpq $0xcccc, %rcx\n"
        "  setne %dl\n"
        "  addl %edx, %eax\n"
        "  movq %xmm12, %rcx\n"
        "  cmpq $0xdddd, %rcx\n"
        "  setne %dl\n"
        "  addl %edx, %eax\n"
        "  movq %xmm13, %rcx\n"
        "  cmpq $0xeeee, %rcx\n"
        "  setne %dl\n"
        "  addl %edx, %eax\n"
        "  movq %xmm14, %rcx\n"
        "  cmpq $0xffff, %rcx\n"
        "  setne %dl\n"
        "  addl %edx, %eax\n"
        "  movq %xmm15, %rcx\n"
        "  cmpq $0x11110, %rcx\n"
        "  setne %dl\n"
        "  addl %edx, %eax\n"
        "  ret\n"
        ".size spin, .-spin\n");

/* Sets `stop` when a byte arrives on stdin; nothing at end of input. */
static void *watch_stdin(void *arg) {
    char c;
    (void)arg;
    if (read(0, &c, 1) == 1)
        stop = 1;
    return NULL;
}

int main(void) {
    pthread_t watcher;
    pthread_create(&watcher, NULL, watch_stdin, NULL);
    printf("ready\n");
    fflush(stdout);
    int bad = spin(&stop);
    if (bad)
        printf("vectors clobbered: %d of 16\n", bad);
    else
        printf("vectors kept\n");
    return bad != 0;
}
