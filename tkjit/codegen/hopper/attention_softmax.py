"""The consumer's online softmax on wgmma accumulator fragments (a mixin of attention.Consumer).

A consumer thread holds, of its warpgroup's 64 x BKV scores S, two rows (lane/4 and lane/4 + 8)
in the m64nN accumulator layout; the row maxima and sums are pairwise trees over the thread's
registers, then over the quad (shfl.bfly 1, 2). Keys past N, and past the diagonal where the IR's
condition says so, are set to -inf on the blocks that need it (a uniform branch skips the rest).
P = 2^(scaled s - scaled max) stays in S's registers as f32 until ``rescale_and_pack`` turns it
into bf16 pairs, the A fragments of P·V.

The host class provides: ``b`` (Builder), ``m`` (AttentionMatch), ``k`` (AttentionKernel), the
register lists ``s``, ``o``, ``p``, the row state ``mx`` and ``l`` (two each), ``qk_scale``,
``folded`` (predicate: the scale is positive), ``quad_col``, ``row_in_tile``, ``rings`` and
``inner()`` (the IR's scalar code).
"""
from __future__ import annotations

NEG_INF = "0fFF800000"


class SoftmaxEmitter:
    """Row reductions, masking, the online softmax and P's packing, emitted into ``self.b``."""

    def rows(self, regs: list[str], half: int) -> list[str]:
        """The accumulator registers of row ``half`` (0: lane/4, 1: lane/4 + 8) of this thread."""
        return [r for n, r in enumerate(regs) if (n >> 1) & 1 == half]

    def tree(self, regs: list[str], op: str) -> str:
        """A pairwise tree of ``op`` over this thread's registers (no shuffles)."""
        b = self.b
        level = list(regs)
        while len(level) > 1:
            nxt = []
            for x, y in zip(level[::2], level[1::2]):
                r = b.reg("f32")
                b(f"{op}.f32 {r}, {x}, {y};")
                nxt.append(r)
            if len(level) % 2:
                nxt.append(level[-1])
            level = nxt
        return level[0]

    def reduce(self, regs: list[str], op: str) -> str:
        """``tree`` over this thread's registers, then over the quad."""
        b = self.b
        acc = self.tree(regs, op)
        for lane_mask in (1, 2):
            other = b.reg("f32")
            b(f"shfl.sync.bfly.b32 {other}, {acc}, {lane_mask}, 31, -1;")
            r = b.reg("f32")
            b(f"{op}.f32 {r}, {acc}, {other};")
            acc = r
        return acc

    def mask(self) -> None:
        """-inf where the key is past N (padding) or, under the IR's condition, past the diagonal;
        a uniform branch skips it on the blocks that need neither."""
        m, b, k = self.m, self.b, self.k
        r = self.rings[self.k.loop_ring]
        ev = self.inner()
        n_keys = k.dim(m.params[m.k].type.dims[-2])
        k0, end, tail, needed = b.reg(), b.reg(), b.pred(), b.pred()
        b(f"mul.lo.s32 {k0}, {r.counter}, {m.bkv};", f"add.s32 {end}, {k0}, {m.bkv};",
          f"setp.gt.s32 {tail}, {end}, {n_keys};")
        causal = None
        if m.mask is not None:
            causal = ev.value(m.mask_cond)
            q0, mk0 = ev.value(m.mask.operands[1]), ev.value(m.mask.operands[2])
            b(f"or.pred {needed}, {tail}, {causal};")
        else:
            b(f"mov.pred {needed}, {tail};")
        skip = b.label("unmasked")
        b(f"@!{needed} bra.uni {skip};")
        base = b.reg()  # the last visible key column, relative to this thread's first column
        b(f"sub.s32 {base}, {n_keys}, {k0};", f"sub.s32 {base}, {base}, 1;", f"sub.s32 {base}, {base}, {self.quad_col};")
        for half in (0, 1):
            lim = b.reg()
            b(f"mov.b32 {lim}, {base};")
            if causal is not None:
                diag = b.reg()  # q0 + r - k0 (the mask's k0) - 2 (lane % 4): key c visible iff c <= diag
                b(f"add.s32 {diag}, {q0}, {self.row_in_tile};", f"add.s32 {diag}, {diag}, {8 * half};",
                  f"sub.s32 {diag}, {diag}, {mk0};", f"sub.s32 {diag}, {diag}, {self.quad_col};",
                  f"@{causal} min.s32 {lim}, {lim}, {diag};")
            for n, reg in enumerate(self.s):
                if (n >> 1) & 1 != half:
                    continue
                col = 8 * (n >> 2) + (n & 1)
                hide = b.pred()
                b(f"setp.lt.s32 {hide}, {lim}, {col};", f"@{hide} mov.f32 {reg}, {NEG_INF};")
        b.place(skip)

    def softmax(self) -> None:
        """The online softmax of the scores in S (P left in S's registers as f32); l rescaled,
        alpha kept for O. With a positive scale c the maxima are taken on the raw scores and each
        score costs one FFMA (s·c - m·c) before ex2; otherwise (max of c·s is not c·max s) the
        scores are scaled first. The choice is a uniform branch on ``self.folded``."""
        b = self.b
        self.alphas = [b.reg("f32"), b.reg("f32")]
        plain, done = b.label("scale_not_positive"), b.label("softmax_done")
        b(f"@!{self.folded} bra.uni {plain};")
        self.mask()
        self.online(folded=True)
        b(f"bra.uni {done};")
        b.place(plain)
        b(*(f"mul.f32 {r}, {r}, {self.qk_scale};" for r in self.s))
        self.mask()
        self.online(folded=False)
        b.place(done)

    def online(self, folded: bool) -> None:
        """Row maxima, P = 2^(scaled s - scaled max), alpha = 2^(scaled old max - scaled max) and
        l = l·alpha + this thread's share of the row sum. ``folded``: S and the maxima are raw
        (unscaled) and the scale goes into one FFMA per element."""
        b, c = self.b, self.qk_scale
        for half in (0, 1):
            row = self.rows(self.s, half)
            mx_new = b.reg("f32")
            b(f"max.f32 {mx_new}, {self.mx[half]}, {self.reduce(row, 'max')};")
            scaled = mx_new
            if folded:
                scaled = b.reg("f32")
                b(f"mul.f32 {scaled}, {mx_new}, {c};")
            use, inf = b.reg("f32"), b.pred()  # a row with no visible key yet: subtract 0, not -inf
            b(f"setp.eq.f32 {inf}, {mx_new}, {NEG_INF};", f"selp.f32 {use}, 0f00000000, {scaled}, {inf};")
            alpha = self.alphas[half]
            if folded:
                neg = b.reg("f32")
                b(f"neg.f32 {neg}, {use};")
                for reg in row:
                    b(f"fma.rn.f32 {reg}, {reg}, {c}, {neg};", f"ex2.approx.ftz.f32 {reg}, {reg};")
                b(f"fma.rn.f32 {alpha}, {self.mx[half]}, {c}, {neg};")
            else:
                for reg in row:
                    b(f"sub.f32 {reg}, {reg}, {use};", f"ex2.approx.ftz.f32 {reg}, {reg};")
                b(f"sub.f32 {alpha}, {self.mx[half]}, {use};")
            b(f"ex2.approx.ftz.f32 {alpha}, {alpha};", f"mov.f32 {self.mx[half]}, {mx_new};")
            total = self.tree(row, "add")  # this thread's share: the quad's are added once, at the end
            b(f"fma.rn.f32 {self.l[half]}, {self.l[half]}, {alpha}, {total};")

    def rescale_and_pack(self, rescale: bool = True) -> None:
        """Once the previous P·V has retired: O *= alpha (``rescale``), and P to bf16 pairs (its A
        fragments)."""
        b = self.b
        for n, reg in enumerate(self.o if rescale else ()):
            b(f"mul.f32 {reg}, {reg}, {self.alphas[(n >> 1) & 1]};")
        for n, reg in enumerate(self.p):
            lo, hi = self.s[2 * n], self.s[2 * n + 1]
            b(f"cvt.rn.bf16x2.f32 {reg}, {hi}, {lo};")
