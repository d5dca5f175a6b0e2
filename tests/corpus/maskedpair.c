/* Two switches of one function whose tables sit back to back in .rodata, in the shape gcc -O2
 * gave redis-server's `checkPrefixCollisionsOrReply` (two inlined `sdslen`s): the first
 * switch's index is masked (`and $7`) but its table has 5 entries, since the compiler knew
 * the value from a compare on another copy of it; its next 3 words are the second table's,
 * offsets from that table, not from the first. The second switch is reached only through
 * the first one's cases, so it is found after the first table is read. Read on, the first
 * table got three targets 20 bytes before the second switch's cases, one inside an
 * instruction, and relocating the function for `coverage` failed with "no instruction at
 * ... in the function's CFG", ending the whole `save`.
 *
 * twotables(a, b): a selects one of 5 cases of the first switch (3 returns a + 100 from the
 * second switch's case b & 3).
 */
#include <stdio.h>

int twotables(int, int);

__asm__(
    ".text\n"
    ".globl twotables\n.type twotables,@function\n"
    "twotables:\n"
    "  mov %edi, %eax\n"
    "  and $7, %eax\n"
    "  lea .Lt1(%rip), %rdx\n"
    "  movslq (%rdx,%rax,4), %rax\n"
    "  add %rdx, %rax\n"
    "  jmp *%rax\n"
    ".La0: mov $10, %eax\n  ret\n"
    ".La1: mov $11, %eax\n  ret\n"
    ".La2: mov $12, %eax\n  ret\n"
    ".La4: mov $14, %eax\n  ret\n"
    "  nopl 0x0(%rax,%rax,1)\n"
    "  movabs $0x1122334455667788, %rcx\n"
    ".La3:\n"
    "  mov %esi, %eax\n"
    "  and $3, %eax\n"
    "  lea .Lt2(%rip), %rdx\n"
    "  movslq (%rdx,%rax,4), %rax\n"
    "  add %rdx, %rax\n"
    "  jmp *%rax\n"
    "  nopl 0x0(%rax,%rax,1)\n"
    "  movabs $0x1122334455667788, %rcx\n"
    "  movabs $0x1122334455667788, %rcx\n"
    ".Lb0: mov $100, %eax\n  ret\n"
    ".Lb1: mov $101, %eax\n  ret\n"
    ".Lb2: mov $102, %eax\n  ret\n"
    ".Lb3: mov $103, %eax\n  ret\n"
    ".size twotables, .-twotables\n"
    ".section .rodata\n"
    ".p2align 2\n"
    ".Lt1: .long .La0-.Lt1, .La1-.Lt1, .La2-.Lt1, .La3-.Lt1, .La4-.Lt1\n"
    ".Lt2: .long .Lb0-.Lt2, .Lb1-.Lt2, .Lb2-.Lt2, .Lb3-.Lt2\n"
    ".text\n");

int main(void) {
    int sum = 0;
    for (int a = 0; a < 5; a++)
        for (int b = 0; b < 4; b++)
            sum += twotables(a, b);
    printf("%d\n", sum);
    return 0;
}
