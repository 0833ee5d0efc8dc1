"""Every one-bit damage of a frame, for the tests that a damaged frame is never taken."""


def one_bit_flips(frame: bytes):
    """``(bit, frame with that bit flipped)`` for every bit of ``frame``, in order."""
    for bit in range(len(frame) * 8):
        damaged = bytearray(frame)
        damaged[bit // 8] ^= 1 << (bit % 8)
        yield bit, bytes(damaged)
