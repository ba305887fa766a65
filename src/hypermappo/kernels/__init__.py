"""The library's C kernels, their builder (c_kernel.py) and their Python wrappers (torch ops)."""
