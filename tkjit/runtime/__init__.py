"""The runtime under the code generator: ptxas and friends (toolchain), the CUDA driver (driver)
and argument checking and packing per kernel (launcher).

Import the submodules directly; none of them touches the GPU or cuda-python at import time.
"""
