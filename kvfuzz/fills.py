"""The two fills of the bytes that are no tensor's element: the canary, and the alternate fill.

Every byte of a case's arena that no tensor's element holds (guard bands, stride gaps, slack)
holds the canary byte; the determinism re-run starts instead from the alternate fill, a word
pattern that encodes each word's own position in the case's arena. The 4-byte word at byte
4*i (little-endian) holds 0xC0 | i >> 21 (5 bits), then i >> 14, i >> 7 and i (7 bits each),
high byte first. No byte of it is the canary byte (0xA5), so any read of a guard band or gap
sees another value under each fill, and a word copied out of it (shifted right by a few bits
or plus a small constant, as the kernels do with page sizes and deltas) gives i back
(`alt_source`). Read as a number it is negative, as the canary is (int32 and int64): a length
or an index read from a guard band takes the same branches under both fills, so the re-run
does not send a kernel writing through memory the canary run left alone.

Standalone (standard library only): kvfuzz's arena (materialize.py) and judge use it, and the
repro script embeds it (kvfuzz.repro.standalone_modules).
"""

CANARY_BYTE = 0xA5
CANARY_WORDS = (-0x5A5A5A5B, -0x5A5A5A5A5A5A5A5B)  # 0xA5A5A5A5 as int32, its 8-byte version as int64
ALT_TAG = 0xC0
# right shifts tried when decoding a value read from the alternate fill: page sizes up to 4096.
# Each keeps the canary's value far from any small number, so only a value the canary run also
# read from the canary decodes (a larger shift would let ordinary small values through).
ALT_MAX_SHIFT = 12
ALT_MAX_OFFSET = 1 << 12  # |constant| added to it


def alt_words(i):
    """The alternate fill's words at word positions `i` (an int, a NumPy array or a torch
    tensor of integers: the formula is the same for each)."""
    return (i & 0x7F) | ((i >> 7) & 0x7F) << 8 | ((i >> 14) & 0x7F) << 16 | (ALT_TAG | ((i >> 21) & 0x1F)) << 24


def alt_word_index(word):
    """i for an alternate-fill word (as an unsigned 32-bit int), None if it is not one."""
    if word >> 29 != ALT_TAG >> 5 or word & 0x00808080:
        return None
    return (word & 0x7F) | ((word >> 8) & 0x7F) << 7 | ((word >> 16) & 0x7F) << 14 | ((word >> 24) & 0x1F) << 21


def alt_source(canary_value, alt_value, bits):
    """(byte offset in the case's arena, how many bytes it may be off) of the word a kernel
    read, given what it stored under the canary fill and under the alternate fill (`bits`:
    the stored element's width): the value is taken as the word read, shifted right by
    s bits, plus a constant, the same under both fills. None when no such reading fits."""
    mask = (1 << bits) - 1
    for s in range(ALT_MAX_SHIFT + 1):
        for canary in CANARY_WORDS:
            c = (canary_value - (canary >> s)) & mask
            c = c - (1 << bits) if c >> (bits - 1) else c
            if abs(c) > ALT_MAX_OFFSET:
                continue
            word = ((alt_value - c) << s) & 0xFFFFFFFF
            i = alt_word_index(word)  # the low s bits were shifted out: zero here, never checked
            if i is not None:
                return 4 * i, 4 << s if s else 0
    return None
