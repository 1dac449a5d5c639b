"""Random predicates and the rows they run on, for the differential SQL and
polars suites (tests/test_sql_differential.py) and their longer run in the
benches (benches/bench_sql_differential.py).

The rows are made so that pruning has something to get wrong: numbers in
runs of narrow ranges (so that chunk bounds rule chunks in and out), nulls,
NaN, signed zeros and infinities in the floats, values at the edges of
their types, a float column of 7.0 but for a long run of 5.1..5.9 (where a
cast to an integer is 5 though the chunk bounds are not), and text with
LIKE's special characters. Every predicate is a string of SQL or a polars
expression built from one seeded generator, so a failure names its seed.
"""

from __future__ import annotations

import math
import random

import numpy as np

ROWS = 48_000

# name: (kind, bits, SQL type of the column)
COLUMNS = {
    "i8": ("int", 8, "TINYINT"),
    "i16": ("int", 16, "SMALLINT"),
    "i32": ("int", 32, "INT"),
    "i64": ("int", 64, "BIGINT"),
    "u8": ("uint", 8, "TINYINT UNSIGNED"),
    "u16": ("uint", 16, "SMALLINT UNSIGNED"),
    "u32": ("uint", 32, "INT UNSIGNED"),
    "u64": ("uint", 64, "BIGINT UNSIGNED"),
    "f32": ("float", 32, "FLOAT"),
    "f64": ("float", 64, "DOUBLE"),
    "f": ("float", 64, "DOUBLE"),
    "g": ("float", 32, "FLOAT"),
    "b": ("bool", 1, "BOOLEAN"),
    "s": ("text", 0, "VARCHAR"),
    "t": ("text", 0, "VARCHAR"),
}

NUMBER_TYPES = {
    "TINYINT": ("int", 8),
    "SMALLINT": ("int", 16),
    "INT": ("int", 32),
    "BIGINT": ("int", 64),
    "TINYINT UNSIGNED": ("uint", 8),
    "SMALLINT UNSIGNED": ("uint", 16),
    "INT UNSIGNED": ("uint", 32),
    "BIGINT UNSIGNED": ("uint", 64),
    "FLOAT": ("float", 32),
    "DOUBLE": ("float", 64),
}


def rows(pa, n: int = ROWS, seed: int = 7):
    """The rows, as a ``pyarrow.Table`` with an ``rid`` (int64) first."""
    rng = np.random.default_rng(seed)
    i = np.arange(n)
    block = i // 3000

    def nulls(p):
        return rng.random(n) < p

    out = {"rid": pa.array(i, pa.int64())}
    # Runs of narrow ranges, shifted from run to run.
    i8 = (block % 20) * 10 - 100 + rng.integers(0, 6, n)
    out["i8"] = pa.array(i8.astype(np.int8), mask=nulls(0.03))
    i16 = block * 50 - 500 + rng.integers(0, 40, n)
    i16[(i % 9000) == 17] = 32767
    i16[(i % 11000) == 5] = -32768
    out["i16"] = pa.array(i16.astype(np.int16), mask=nulls(0.02))
    i32 = np.where(block % 3 == 0, rng.integers(-(2**31) + 2, 2**31 - 2, n), block * 1000 + i % 7)
    out["i32"] = pa.array(i32.astype(np.int32))
    i64 = rng.zipf(1.5, n).clip(0, 1000) + block
    i64[(i > 20_000) & (i < 21_000)] = 2**62 + i[(i > 20_000) & (i < 21_000)]
    i64[i == 33_333] = -(2**63)
    out["i64"] = pa.array(i64.astype(np.int64), mask=nulls(0.01))
    u8 = (block * 7 + rng.integers(0, 4, n)) % 256
    u8[i == 100] = 255
    out["u8"] = pa.array(u8.astype(np.uint8))
    u16 = block * 300 + rng.integers(0, 100, n)
    out["u16"] = pa.array(u16.astype(np.uint16), mask=nulls(0.05))
    u32 = np.where(block % 4 == 1, rng.integers(0, 2**32, n), block * 100_000 + i % 13)
    out["u32"] = pa.array(u32.astype(np.uint32))
    u64 = np.where(
        block % 5 == 2, rng.integers(2**63, 2**64, n, dtype=np.uint64), i.astype(np.uint64)
    )
    out["u64"] = pa.array(u64.astype(np.uint64), mask=nulls(0.02))
    f64 = block * 2.5 - 20 + rng.random(n) * 2
    f64[(i % 97) == 3] = np.nan
    f64[(i % 89) == 5] = -0.0
    f64[(i % 83) == 7] = 0.0
    f64[i == 4444] = np.inf
    f64[i == 5555] = -np.inf
    f64[(i > 30_000) & (i < 30_500)] = 3e9 + i[(i > 30_000) & (i < 30_500)]
    out["f64"] = pa.array(f64, mask=nulls(0.02))
    f32 = (block * 0.75 - 5 + rng.random(n)).astype(np.float32)
    f32[(i % 101) == 1] = np.nan
    f32[(i % 103) == 2] = -0.0
    f32[(i % 107) == 4] = 0.0
    out["f32"] = pa.array(f32, mask=nulls(0.02))
    # The column: 7.0, but for a long run of 5.1..5.9.
    f = np.full(n, 7.0)
    run = (i >= n // 5) & (i < n // 5 + (n * 7) // 20)
    f[run] = 5.1 + rng.integers(0, 9, run.sum()) / 10
    out["f"] = pa.array(f)
    out["g"] = pa.array(f.astype(np.float32))
    out["b"] = pa.array(rng.random(n) < 0.3, mask=nulls(0.04))
    words = ["v" + str(k) for k in (block * 37 + rng.integers(0, 30, n))]
    words = [w + "é" if k % 13 == 0 else w for k, w in enumerate(words)]
    out["s"] = pa.array(words, pa.string(), mask=nulls(0.03))
    special = ["a_b", "a%b", "a\\b", "ab", "%", "_", "", "x_y%z", "100%", "A_B", "a\\_b"]
    t = [
        special[k % len(special)] + ("" if k % 5 else str(k % 7)) for k in rng.integers(0, 10**6, n)
    ]
    out["t"] = pa.array(t, pa.string(), mask=nulls(0.02))
    return pa.table(out)


def _ranges(data) -> dict:
    """Per number column: (min, max, has NaN or infinity), nulls aside."""
    out = {}
    for name, (kind, _, _) in COLUMNS.items():
        if kind in ("text", "bool"):
            continue
        v = data[name].drop_null().to_numpy()
        finite = v[np.isfinite(v)] if kind == "float" else v
        out[name] = (
            int(finite.min()) if kind != "float" else float(finite.min()),
            int(finite.max()) if kind != "float" else float(finite.max()),
            kind == "float" and not np.isfinite(v).all(),
        )
    return out


def _zero(literal: str) -> bool:
    """Whether an SQL number literal of :meth:`Sql.number` is a zero."""
    if literal.startswith("CAST("):
        return "-0.0" in literal
    try:
        return float(literal) == 0
    except ValueError:
        return False


def _fits(lo, hi, kind: str, bits: int) -> bool:
    """Whether every value in [lo, hi] (truncated) is one of the type."""
    if kind == "float":
        return True
    lo, hi = math.trunc(lo), math.trunc(hi)
    if kind == "int":
        return -(2 ** (bits - 1)) <= lo and hi < 2 ** (bits - 1)
    return 0 <= lo and hi < 2**bits


class Sql:
    """Random SQL predicates over :data:`COLUMNS` of ``data``."""

    def __init__(self, data, seed: int):
        self.r = random.Random(seed)
        self.ranges = _ranges(data)
        self.samples = {
            name: [v for v in data[name].to_pylist()[:: max(1, len(data) // 300)] if v is not None]
            for name in COLUMNS
        }

    def column(self, kinds=("int", "uint", "float")) -> str:
        return self.r.choice([c for c, (k, _, _) in COLUMNS.items() if k in kinds])

    def number(self, name: str) -> str:
        """A literal to compare column ``name`` with."""
        r = self.r
        kind, bits, _ = COLUMNS[name]
        pick = r.random()
        sample = [v for v in self.samples[name] if not (isinstance(v, float) and math.isnan(v))]
        if pick < 0.4 and sample:
            v = r.choice(sample)
        elif pick < 0.55:
            v = r.choice(
                [0, -1, 1, 5, 7, 127, 128, 255, 256, -129, 2**31, 2**63 - 1, -(2**63), 2**53 + 1]
            )
        elif pick < 0.75:
            lo, hi, _ = self.ranges[name]
            v = r.uniform(float(lo), float(hi))
            v = round(v, r.choice([0, 1, 2])) if kind == "float" or r.random() < 0.5 else int(v)
        elif pick < 0.85:
            v = r.choice([0.0, -0.0, 5.5, 5.0, 2.5, -3.25, 1e30, -1e30, 0.1, 7.0, 3e9 + 31_000.5])
        else:
            return r.choice(
                ["CAST('NaN' AS DOUBLE)", "CAST('inf' AS DOUBLE)", "-0.0", "CAST(-0.0 AS FLOAT)"]
            )
        if isinstance(v, float):
            if math.isinf(v):
                return "CAST('inf' AS DOUBLE)" if v > 0 else "CAST('-inf' AS DOUBLE)"
            return repr(v)
        return str(v)

    def operand(self, name: str) -> tuple[str, str]:
        """The column, or a cast of it: (SQL, the kind compared)."""
        r = self.r
        kind, bits, _ = COLUMNS[name]
        if r.random() < 0.55:
            return name, kind
        to = r.choice(list(NUMBER_TYPES))
        tkind, tbits = NUMBER_TYPES[to]
        lo, hi, odd = self.ranges[name]
        safe = (
            not odd
            and _fits(lo, hi, tkind, tbits)
            and not (kind == "float" and tkind != "float" and odd)
        )
        fn = "CAST" if safe and r.random() < 0.7 else "TRY_CAST"
        inner = name
        if r.random() < 0.15:
            # A cast of a cast.
            mid = r.choice(["BIGINT", "DOUBLE", "FLOAT", "INT"])
            mkind, mbits = NUMBER_TYPES[mid]
            if kind == "float" and mkind != "float":
                fn = "TRY_CAST"
            inner = f"TRY_CAST({name} AS {mid})"
        return f"{fn}({inner} AS {to})", tkind

    def leaf(self) -> str:
        r = self.r
        pick = r.random()
        if pick < 0.45:
            name = self.column()
            op = r.choice(["=", "<>", "<", "<=", ">", ">="])
            lhs, _ = self.operand(name)
            lit = self.number(name)
            return f"{lit} {op} {lhs}" if r.random() < 0.15 else f"{lhs} {op} {lit}"
        if pick < 0.52:
            name = self.column()
            lhs, _ = self.operand(name)
            a, b = sorted([self.number(name) for _ in range(2)], key=lambda x: len(x))
            neg = "NOT " if r.random() < 0.3 else ""
            return f"{lhs} {neg}BETWEEN {a} AND {b}"
        if pick < 0.60:
            name = self.column()
            lhs, _ = self.operand(name)
            # No zero in a list: DataFusion compares a list's floats by
            # their bits (-0 is not +0) but an OR of `=` with zeros equal,
            # and which of the two it runs depends on its plan (the same
            # list over memory and over a scan can take either form).
            items = ", ".join(
                "1" if _zero(x) else x for x in (self.number(name) for _ in range(r.randint(1, 4)))
            )
            neg = "NOT " if r.random() < 0.3 else ""
            return f"{lhs} {neg}IN ({items})"
        if pick < 0.66:
            name = r.choice(list(COLUMNS))
            return f"{name} IS {'NOT ' if r.random() < 0.5 else ''}NULL"
        if pick < 0.76:
            name = r.choice(["s", "t"])
            pats = {
                "s": ["v1%", "%7", "%3%", "v12", "%é%", "v_1%", "%%", "V1%", "v%2"],
                "t": ["a\\_b%", "%\\%%", "a_b", "%\\%", "%\\\\%", "100\\%", "a\\_b", "%_", "_"],
            }[name]
            pat = r.choice(pats)
            op = r.choice(["LIKE", "LIKE", "NOT LIKE", "ILIKE"])
            # DataFusion takes no escape character but the backslash.
            esc = " ESCAPE '\\'" if "\\" in pat and r.random() < 0.5 else ""
            pat = pat.replace("'", "''")
            return f"{name} {op} '{pat}'{esc}"
        if pick < 0.84:
            name = r.choice(["s", "t"])
            op = r.choice(["=", "<>", "<", "<=", ">", ">="])
            sample = (
                r.choice(self.samples[name])
                if r.random() < 0.7
                else r.choice(["v5", "a", "", "v100é", "z"])
            )
            lit = sample.replace("'", "''")
            if r.random() < 0.2:
                return f"length({name}) {op} {r.randint(0, 6)}"
            return f"{name} {op} '{lit}'"
        if pick < 0.88:
            return f"b = {r.choice(['true', 'false'])}" if r.random() < 0.7 else "b"
        # Arithmetic and functions of a column.
        name = r.choice(["i8", "i16", "i32", "u8", "u16", "f64", "f32", "f", "g"])
        lit = self.number(name)
        op = r.choice(["=", "<", ">=", "<>"])
        form = r.choice(
            [
                f"{name} + 3",
                f"{name} - 1",
                f"{name} * 2",
                f"abs({name})",
                f"coalesce({name}, 0)",
                f"round({name})" if COLUMNS[name][0] == "float" else f"{name} % 7",
                f"CAST({name} AS DOUBLE) / 4",
            ]
        )
        return f"{form} {op} {lit}"

    def predicate(self, depth: int = 0) -> str:
        r = self.r
        if depth >= 3 or r.random() < 0.45:
            return self.leaf()
        pick = r.random()
        if pick < 0.1:
            return f"NOT ({self.predicate(depth + 1)})"
        op = "AND" if pick < 0.55 else "OR"
        return f"({self.predicate(depth + 1)}) {op} ({self.predicate(depth + 1)})"


class Polars:
    """Random polars predicates over :data:`COLUMNS`."""

    def __init__(self, pl, data, seed: int):
        self.pl = pl
        self.r = random.Random(seed)
        self.ranges = _ranges(data)
        self.samples = {
            name: [v for v in data[name].to_pylist()[:: max(1, len(data) // 300)] if v is not None]
            for name in COLUMNS
        }

    def number(self, name: str):
        r = self.r
        kind, _, _ = COLUMNS[name]
        pick = r.random()
        sample = [v for v in self.samples[name] if not (isinstance(v, float) and math.isnan(v))]
        if pick < 0.45 and sample:
            return r.choice(sample)
        if pick < 0.6:
            return r.choice([0, -1, 1, 5, 7, 127, 128, 255, 300, -129])
        if pick < 0.8:
            lo, hi, _ = self.ranges[name]
            v = r.uniform(float(lo), float(hi))
            return round(v, 1) if kind == "float" else int(v)
        return r.choice([0.0, -0.0, 5.5, 2.5, -3.25, 0.1, 7.0, float("nan"), float("inf")])

    def leaf(self):
        pl, r = self.pl, self.r
        c = pl.col
        pick = r.random()
        if pick < 0.5:
            name = r.choice(
                [n for n, (k, _, _) in COLUMNS.items() if k in ("int", "uint", "float")]
            )
            lit = self.number(name)
            if isinstance(lit, int) and COLUMNS[name][0] != "float" and r.random() < 0.5:
                # A literal of the column's own type.
                lit = pl.lit(lit).cast(pl.Int64) if COLUMNS[name][0] == "int" else pl.lit(lit)
            op = r.choice(["eq", "ne", "lt", "le", "gt", "ge"])
            e = getattr(c(name), op)(lit)
            return e
        if pick < 0.58:
            name = r.choice(list(COLUMNS))
            return c(name).is_null() if r.random() < 0.5 else c(name).is_not_null()
        if pick < 0.68:
            name = r.choice(["s", "t"])
            s = r.choice(["v1", "7", "3", "é", "a_b", "%", "\\", "v12", ""])
            test = r.choice(["contains", "starts_with", "ends_with", "contains_literal"])
            if test == "contains_literal":
                return c(name).str.contains(s, literal=True)
            if test == "contains":
                return c(name).str.contains(s.replace("\\", "\\\\"))
            return getattr(c(name).str, test)(s)
        if pick < 0.76:
            name = r.choice(["s", "t"])
            op = r.choice(["eq", "ne", "lt", "le", "gt", "ge"])
            lit = (
                r.choice(self.samples[name]) if r.random() < 0.7 else r.choice(["v5", "a", "", "z"])
            )
            return getattr(c(name), op)(lit)
        if pick < 0.82:
            name = r.choice(["i16", "u8", "f64", "f"])
            a, b = sorted([self.number(name), self.number(name)], key=lambda v: (math.isnan(v), v))
            return c(name).is_between(a, b)
        if pick < 0.88:
            name = r.choice(["i8", "i64", "u16"])
            sample = self.samples[name]
            return c(name).is_in([r.choice(sample) for _ in range(3)] + [r.choice([0, 5, 300])])
        if pick < 0.92:
            return c("b") == r.choice([True, False])
        name = r.choice(["i8", "i16", "f64", "f", "g"])
        form = r.choice(
            [
                c(name) + 3,
                c(name).abs(),
                c(name).cast(pl.Int64, strict=False),
                c(name).cast(pl.Int32, strict=False),
                c(name).fill_null(0),
            ]
        )
        return getattr(form, r.choice(["eq", "lt", "ge"]))(self.number(name))

    def predicate(self, depth: int = 0):
        r = self.r
        if depth >= 3 or r.random() < 0.45:
            return self.leaf()
        pick = r.random()
        if pick < 0.1:
            return ~self.predicate(depth + 1)
        a, b = self.predicate(depth + 1), self.predicate(depth + 1)
        return (a & b) if pick < 0.55 else (a | b)
