"""Test support that CI and the long-running scripts share: token mutation of kernel text
(``mutate``) and a generator of random valid kernels (``gen``). Not used by the compiler."""
