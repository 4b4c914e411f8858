"""RSI/Kernel-v0: the kernel's tier (`tier`: the hidden harness in a fresh sandbox, signed reports) and its env."""
