/* Freestanding support linked into every ELF that firmware_sim.toolchain.build() makes.
 *
 * gcc and clang emit calls to memset/memcpy/memmove for struct copies and zeroing loops even
 * with -ffreestanding, and -nostdlib leaves them undefined. Byte loops keep these small and
 * honest; --gc-sections drops each one the code under test does not call. Compiled with
 * -fno-tree-loop-distribute-patterns (gcc) so the loops are not turned back into calls to
 * themselves.
 */
#include <stddef.h>

void *memset(void *dst, int c, size_t n)
{
    unsigned char *d = (unsigned char *)dst;
    while (n--) {
        *d++ = (unsigned char)c;
    }
    return dst;
}

void *memcpy(void *dst, const void *src, size_t n)
{
    unsigned char *d = (unsigned char *)dst;
    const unsigned char *s = (const unsigned char *)src;
    while (n--) {
        *d++ = *s++;
    }
    return dst;
}

void *memmove(void *dst, const void *src, size_t n)
{
    unsigned char *d = (unsigned char *)dst;
    const unsigned char *s = (const unsigned char *)src;
    if (d < s) {
        while (n--) {
            *d++ = *s++;
        }
    } else {
        d += n;
        s += n;
        while (n--) {
            *--d = *--s;
        }
    }
    return dst;
}
