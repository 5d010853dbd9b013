/* The float format explorer (site/explorer.md): flip the bits of a format, read its key
 * numbers, see its grid, round a typed value (its ulp, its two neighbours, one row per distinct
 * result, stochastic rounding's odds). Plain JavaScript, no network. The state (format, code,
 * value, mode) lives in the address after # (see stateFromHash), so a chapter can link to it.
 *
 * The arithmetic follows the course's package line by line, so that the page shows the same
 * numbers: decode, ulp, the FloatFormat properties and finite_values from nbhelpers/formats.py,
 * and round_to (modes nearest_even, nearest_away, toward_zero, and the neighbours and threshold
 * of stochastic; saturate or not) from nbhelpers/rounding.py. tests/test_site_explorer.py
 * compares the two, value by value.
 *
 * Why JavaScript's Number (a float64) is exact here: every value of a format with at most 8
 * exponent bits and 23 mantissa bits is sig * 2**k with sig < 2**24 and k well inside float64's
 * exponent range (|k| < 600 even with the widest bias the page accepts), so it is a float64
 * exactly; multiplying by a power of two (built from its bits, not by Math.pow) is exact while
 * the result stays in float64's normal range; and the rounding below only scales, takes integer
 * parts and compares. The typed value is read as a float64 (as Python's float() reads it),
 * which is what round_to receives. Exact decimal expansions are written with BigInt.
 */
(function () {
  "use strict";

  // ------------------------------------------------------------------ float64 bits
  const buffer = new DataView(new ArrayBuffer(8));

  /** 2**k exactly, for integer k in [-1074, 1023]: written as a float64 bit pattern. */
  function pow2(k) {
    if (k > 1023) return Infinity;
    if (k < -1074) return 0;
    if (k < -1022) return pow2(k + 64) * pow2(-64); // a float64 subnormal: still exact
    buffer.setUint32(0, (k + 1023) * 0x100000); // biased exponent in bits 20..30 of the high word
    buffer.setUint32(4, 0);
    return buffer.getFloat64(0);
  }

  /** The biased exponent field of a float64 (0 for zeros and subnormals, 2047 for inf/NaN). */
  function biasedExponent64(a) {
    buffer.setFloat64(0, a);
    return (buffer.getUint32(0) >>> 20) & 0x7ff;
  }

  /** A finite float64 as [sig, k] with a = sig * 2**k, sig an odd integer (or 0). */
  function dyadic(a) {
    if (a === 0) return [0n, 0];
    buffer.setFloat64(0, a);
    const hi = buffer.getUint32(0);
    const lo = buffer.getUint32(4);
    const biased = (hi >>> 20) & 0x7ff;
    let sig = (BigInt(hi & 0xfffff) << 32n) | BigInt(lo);
    let k;
    if (biased === 0) {
      k = -1074;
    } else {
      sig |= 1n << 52n;
      k = biased - 1075;
    }
    while ((sig & 1n) === 0n) {
      sig >>= 1n;
      k += 1;
    }
    return [a < 0 ? -sig : sig, k];
  }

  /** The exact decimal expansion of a float64 (every finite float64 has a finite one). */
  function exactDecimal(a) {
    if (Number.isNaN(a)) return "NaN";
    if (a === Infinity) return "inf";
    if (a === -Infinity) return "-inf";
    if (a === 0) return Object.is(a, -0) ? "-0" : "0";
    let [sig, k] = dyadic(a);
    const sign = sig < 0n ? "-" : "";
    if (sig < 0n) sig = -sig;
    if (k >= 0) return sign + (sig << BigInt(k)).toString();
    // sig / 2**n = sig * 5**n / 10**n
    const n = -k;
    let digits = (sig * 5n ** BigInt(n)).toString();
    if (digits.length <= n) digits = "0".repeat(n - digits.length + 1) + digits;
    const whole = digits.slice(0, digits.length - n);
    const frac = digits.slice(digits.length - n).replace(/0+$/, "");
    return sign + whole + (frac ? "." + frac : "");
  }

  /** Whether a float64 has its sign bit set (true for -0 and negative NaN payloads aside). */
  function signbit(a) {
    return a < 0 || Object.is(a, -0);
  }

  // ------------------------------------------------------------------ formats
  const SPECIALS = {
    ieee: "Inf at the all-ones exponent with mantissa 0, NaN with any other mantissa; overflow gives inf",
    fn: "No inf; only the all-ones code (exponent and mantissa) is NaN; overflow gives NaN",
    finite: "No inf, no NaN: every code is a number; overflow saturates to max",
    power_of_two:
      "Unsigned powers of two, no zero; the all-ones code is NaN; overflow gives NaN; with no mantissa bit a tie " +
      "(3 between 2 and 4) has no even neighbour, so both nearest modes take the larger, the course's rule",
  };

  // nbhelpers.formats.FORMATS: name -> (exp_bits, man_bits, specials); the bias is derived
  const PRESETS = {
    fp32: [8, 23, "ieee"],
    tf32: [8, 10, "ieee"],
    bf16: [8, 7, "ieee"],
    fp16: [5, 10, "ieee"],
    e4m3fn: [4, 3, "fn"],
    e5m2: [5, 2, "ieee"],
    e3m2fn: [3, 2, "finite"],
    e2m3fn: [2, 3, "finite"],
    e2m1fn: [2, 1, "finite"],
    e8m0fnu: [8, 0, "power_of_two"],
  };

  const MAX_BIAS = 500; // keeps every value, and every step of the rounding, exact in float64

  function standardBias(expBits) {
    return 2 ** (expBits - 1) - 1;
  }

  /** A format from a preset name or a spec {expBits, manBits, specials, bias?}, with the
   * derived numbers of nbhelpers' FloatFormat. Throws Error for a format the package refuses. */
  function format(spec) {
    if (spec && spec.derived) return spec;
    const key = typeof spec === "string" ? spec : JSON.stringify(spec);
    if (!formats.has(key)) formats.set(key, derive(spec));
    return formats.get(key);
  }
  const formats = new Map(); // the derived formats, by their spec

  function derive(spec) {
    if (typeof spec === "string") {
      if (!Object.hasOwn(PRESETS, spec)) throw new Error(`unknown format ${spec}`);
      const [e, m, s] = PRESETS[spec];
      return derive({ name: spec, expBits: e, manBits: m, specials: s });
    }
    const e = spec.expBits;
    const m = spec.manBits;
    const specials = spec.specials || "ieee";
    if (!Object.hasOwn(SPECIALS, specials)) throw new Error(`unknown specials convention ${specials}`);
    if (!Number.isInteger(e) || e < 1 || e > 8) throw new Error("exponent bits: 1 to 8");
    if (!Number.isInteger(m) || m < 0 || m > 23) throw new Error("mantissa bits: 0 to 23");
    if (specials === "power_of_two" && m !== 0) {
      throw new Error("an unsigned power-of-two format (like e8m0fnu) has no mantissa bits");
    }
    if (specials !== "power_of_two" && m === 0) {
      throw new Error("a signed format needs at least one mantissa bit");
    }
    if (specials === "ieee" && e < 2) {
      throw new Error("IEEE specials need at least 2 exponent bits: with 1 there are no normal numbers");
    }
    const bias = spec.bias === undefined || spec.bias === null ? standardBias(e) : spec.bias;
    if (!Number.isInteger(bias) || Math.abs(bias) > MAX_BIAS) {
      throw new Error(`the bias is an integer from -${MAX_BIAS} to ${MAX_BIAS}`);
    }
    const signed = specials !== "power_of_two";
    const f = { derived: true, expBits: e, manBits: m, specials, bias, signed };
    f.name = spec.name || presetOf(f) || customName(f); // the fields of bf16 are bf16
    f.bits = (signed ? 1 : 0) + e + m;
    f.allOnes = 2 ** e - 1;
    f.emin = specials === "power_of_two" ? -bias : 1 - bias;
    const top = f.allOnes - bias; // exponent of the all-ones field
    f.emax = specials === "ieee" || specials === "power_of_two" || (specials === "fn" && m === 0) ? top - 1 : top;
    // the largest significand: all ones, or one less where the all-ones code is NaN
    const sigMax = specials === "fn" ? 2 ** (m + 1) - 2 : 2 ** (m + 1) - 1;
    f.max = sigMax * pow2(f.emax - m);
    f.smallestNormal = pow2(f.emin);
    f.hasSubnormals = specials !== "power_of_two" && m > 0;
    f.smallestSubnormal = f.hasSubnormals ? pow2(f.emin - m) : null;
    f.eps = pow2(-m);
    f.unitRoundoff = f.eps / 2;
    f.hasInf = specials === "ieee";
    f.hasNan = specials !== "finite";
    f.hasZero = specials !== "power_of_two";
    return f;
  }

  /** The preset with these fields, if there is one. */
  function presetOf(f) {
    for (const [name, [e, m, s]] of Object.entries(PRESETS)) {
      if (e === f.expBits && m === f.manBits && s === f.specials && f.bias === standardBias(e)) return name;
    }
    return null;
  }

  /** A name as the package gives a custom format (eXmY, eXmYfn), told apart from a preset of
   * the same name with other specials, and with its bias where that is not the usual one. */
  function customName(f) {
    const suffix = f.specials === "ieee" ? "" : f.specials === "power_of_two" ? "fnu" : "fn";
    let name = `e${f.expBits}m${f.manBits}${suffix}`;
    if (Object.hasOwn(PRESETS, name) && PRESETS[name][2] !== f.specials) {
      name += f.specials === "fn" ? " (with NaN)" : " (no NaN)"; // e3m2fn is FINITE, e4m3fn FN
    }
    return f.bias === standardBias(f.expBits) ? name : `${name}, bias ${f.bias}`;
  }

  /** How many distinct finite values the format has (+0 and -0 are one value, as in
   * nbhelpers' finite_values). */
  function finiteCount(f) {
    let codes = 2 ** f.bits;
    if (f.specials === "ieee") codes -= (f.signed ? 2 : 1) * 2 ** f.manBits; // inf and NaNs
    else if (f.specials === "fn") codes -= 2; // +-NaN
    else if (f.specials === "power_of_two") codes -= 1; // NaN
    return f.hasZero && f.signed ? codes - 1 : codes;
  }

  function keyNumbers(spec) {
    const f = format(spec);
    return {
      name: f.name,
      bits: f.bits,
      bias: f.bias,
      emin: f.emin,
      emax: f.emax,
      max: f.max,
      smallestNormal: f.smallestNormal,
      smallestSubnormal: f.smallestSubnormal,
      eps: f.eps,
      unitRoundoff: f.unitRoundoff,
      finiteValues: finiteCount(f),
    };
  }

  // ------------------------------------------------------------------ decode
  function fields(f, code) {
    if (!Number.isInteger(code) || code < 0 || code >= 2 ** f.bits) {
      throw new Error(`code ${code} does not fit in ${f.name}: codes are 0 .. ${2 ** f.bits - 1}`);
    }
    // arithmetic rather than bit operators: JavaScript's are 32-bit signed, fp32 codes are not
    const mantissa = code % 2 ** f.manBits;
    const exponent = Math.floor(code / 2 ** f.manBits) % 2 ** f.expBits;
    const sign = f.signed ? Math.floor(code / 2 ** (f.expBits + f.manBits)) : 0;
    return { sign, exponent, mantissa };
  }

  /** The value of one code and its class, as nbhelpers.formats.decode computes it. */
  function decode(spec, code) {
    const f = format(spec);
    const { sign, exponent, mantissa } = fields(f, code);
    const m = f.manBits;
    let value;
    let cls;
    if (f.specials === "power_of_two") {
      value = exponent === f.allOnes ? NaN : pow2(exponent - f.bias);
      cls = exponent === f.allOnes ? "NaN" : "normal";
    } else {
      const normal = exponent > 0;
      const sig = normal ? mantissa + 2 ** m : mantissa;
      value = sig * pow2((normal ? exponent - f.bias : f.emin) - m); // exact: sig < 2**24
      cls = value === 0 ? "zero" : normal ? "normal" : "subnormal";
      if (exponent === f.allOnes) {
        if (f.specials === "ieee") {
          value = mantissa === 0 ? Infinity : NaN;
          cls = mantissa === 0 ? "inf" : "NaN";
        } else if (f.specials === "fn" && mantissa === 2 ** m - 1) {
          value = NaN;
          cls = "NaN";
        }
      }
      if (sign) value = -value;
    }
    return { value, cls, sign, exponent, mantissa };
  }

  /** A decoded code field by field, like nbhelpers.formats.describe. */
  function formulaOf(f, d) {
    if (d.cls === "NaN") return "NaN";
    const s = d.sign ? "-" : "+";
    if (d.cls === "inf") return `${s}inf`;
    if (f.specials === "power_of_two") return `2^(${d.exponent}-${f.bias}) = ${show(d.value)}`;
    const m = 2 ** f.manBits;
    if (d.exponent === 0) return `${s}2^(${f.emin}) × (${d.mantissa}/${m}) = ${show(d.value)}`;
    return `${s}2^(${d.exponent}-${f.bias}) × (1 + ${d.mantissa}/${m}) = ${show(d.value)}`;
  }

  function hex(f, code) {
    const digits = Math.ceil(f.bits / 4);
    return "0x" + code.toString(16).toUpperCase().padStart(digits, "0");
  }

  /** Sorted distinct finite values (nonnegative ones only if asked), as finite_values does;
   * formats of at most 16 bits. */
  function finiteValues(spec, nonnegative) {
    const f = format(spec);
    if (f.bits > 16) throw new Error(`${f.name} has ${f.bits} bits: listing its values is for formats of at most 16`);
    const seen = new Set();
    for (let code = 0; code < 2 ** f.bits; code++) {
      const v = decode(f, code).value;
      if (Number.isFinite(v) && (!nonnegative || v >= 0)) seen.add(v === 0 ? 0 : v); // -0 joins +0
    }
    return [...seen].sort((a, b) => a - b);
  }

  // ------------------------------------------------------------------ rounding
  const MODES = ["nearest_even", "nearest_away", "toward_zero"];

  /** Round a nonnegative y (a float64, possibly inf or NaN) to an integer by the mode. */
  function roundInteger(y, mode) {
    if (mode === "toward_zero") return Math.trunc(y);
    const low = Math.floor(y);
    const frac = y - low; // exact: low and y lie in the same binade, or low is 0
    if (mode === "nearest_away") return low + (frac >= 0.5 ? 1 : 0);
    if (frac > 0.5) return low + 1;
    if (frac < 0.5 || Number.isNaN(frac)) return low;
    return low % 2 === 0 ? low : low + 1; // a tie: to the even integer (numpy's rint)
  }

  /** What a value beyond max becomes (nbhelpers.rounding._overflow_value). */
  function overflowValue(f, saturate) {
    if (saturate) return f.max;
    if (f.specials === "ieee") return Infinity;
    if (f.specials === "fn" || f.specials === "power_of_two") return NaN;
    return f.max; // finite formats have nothing else
  }

  /** round_to for one float64: _round_chunk, or _round_power_of_two_chunk for e8m0fnu-style. */
  function roundValue(f, x, mode, saturate) {
    if (f.specials === "power_of_two") return roundPowerOfTwo(f, x, mode, saturate);
    const m = f.manBits;
    const a = Math.abs(x);
    // the exponent of |x|, clamped to [emin, emax + 1]: below emin the spacing is the
    // subnormal one; anything above emax + 1 overflows anyway
    const e = Math.min(Math.max(biasedExponent64(a) - 1023, f.emin), f.emax + 1);
    const y = roundInteger(a * pow2(m - e), mode); // |x| / q, exact: q = 2**(e - m)
    let r = y * pow2(e - m); // on the grid (or beyond max)
    if (r > f.max) {
      if (mode === "toward_zero") {
        // never rounds up: a finite x lands on max; inf becomes what the format makes of inf
        r = !saturate && y === Infinity ? overflowValue(f, saturate) : f.max;
      } else {
        r = overflowValue(f, saturate);
      }
    }
    return signbit(x) ? -r : r; // numpy's copysign(r, x)
  }

  function roundPowerOfTwo(f, x, mode, saturate) {
    if (!(x > 0)) return NaN; // zero, negative, NaN: no code for them
    let r;
    if (x === Infinity) {
      r = Infinity;
    } else {
      const biased = biasedExponent64(x);
      const low = biased === 0 ? pow2(Math.floor(Math.log2(x))) : pow2(biased - 1023); // power of two <= x
      // (a float64 subnormal is far below 2**-500 and ends at the smallest value anyway)
      r = mode === "toward_zero" || x < 1.5 * low ? low : 2 * low; // a tie goes up: no even neighbour
    }
    r = Math.max(r, f.smallestNormal); // no zero: tiny values land on 2**emin
    if (mode === "toward_zero" && r > f.max && Number.isFinite(x)) r = f.max;
    if (r > f.max) r = saturate ? f.max : NaN;
    return r;
  }

  /** The code of a value on the grid (nbhelpers.formats._values_to_bits); null for NaN in a
   * format without NaN. `negative` is the input's sign, which a NaN result keeps. */
  function encodeValue(f, r, negative) {
    const m = f.manBits;
    if (Number.isNaN(r)) {
      if (!f.hasNan) return null;
      if (f.specials === "power_of_two") return f.allOnes;
      const nan = f.specials === "ieee" ? f.allOnes * 2 ** m + 2 ** (m - 1) : f.allOnes * 2 ** m + 2 ** m - 1;
      return nan + (negative ? 2 ** (f.expBits + m) : 0);
    }
    const mag = Math.abs(r);
    if (f.specials === "power_of_two") return biasedExponent64(mag) - 1023 + f.bias;
    let code;
    if (mag === Infinity) {
      code = f.allOnes * 2 ** m;
    } else if (mag >= f.smallestNormal) {
      const e = biasedExponent64(mag) - 1023;
      code = (e + f.bias) * 2 ** m + (mag * pow2(m - e) - 2 ** m);
    } else {
      code = mag * pow2(m - f.emin); // a subnormal (or zero): exponent field 0
    }
    return code + (signbit(r) ? 2 ** (f.expBits + m) : 0);
  }

  /** A typed number as a float64: decimal or scientific notation, inf or nan (a NaN's sign
   * is dropped, so "-nan" gets the positive NaN code). */
  function parseValue(x) {
    if (typeof x === "number") return x;
    const text = String(x).trim().toLowerCase().replace(/^\+/, "");
    if (text === "nan" || text === "-nan") return NaN;
    if (/^-?(inf|infinity)$/.test(text)) return text[0] === "-" ? -Infinity : Infinity;
    if (!/^-?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$/.test(text)) throw new Error(`not a number: ${x}`);
    return Number(text); // correctly rounded to the nearest float64, like Python's float()
  }

  /** round_to(x, fmt, mode, saturate=True or None) for one value, with the result's code and
   * its error against x (the float64 the typed text reads as). */
  function round(spec, x, mode, saturate) {
    const f = format(spec);
    if (!MODES.includes(mode)) throw new Error(`unknown rounding mode ${mode}`);
    const xv = parseValue(x);
    const value = roundValue(f, xv, mode, Boolean(saturate));
    const code = encodeValue(f, value, signbit(xv));
    const [absError, relError] = errorsOf(xv, value);
    return {
      x: xv,
      value,
      code,
      hex: code === null ? null : hex(f, code),
      cls: code === null ? "NaN" : decode(f, code).cls,
      absError,
      relError,
    };
  }

  /** The absolute and relative error of a result r for x: |x - r| (one IEEE subtraction:
   * correctly rounded) and that over |x|. NaN only where x or r is NaN; an exact result (inf
   * for inf included) has error 0; a finite x that overflows to inf has error inf, and so has
   * inf saturated to max, whose relative error is 1 (the limit of |x - max| / |x|). */
  function errorsOf(x, r) {
    if (Number.isNaN(x) || Number.isNaN(r)) return [NaN, NaN];
    if (x === r) return [0, 0];
    const absError = Math.abs(x - r);
    if (!Number.isFinite(x)) return [absError, 1];
    return [absError, x !== 0 ? absError / Math.abs(x) : 0];
  }

  // ------------------------------------------------------------------ spacing, neighbours
  /** nbhelpers.formats.ulp: the spacing of the grid at |x|, from the start of x's binade to
   * the next value (below the smallest normal, the subnormal spacing; zero gets that too). x is
   * taken as it is, not rounded first; it is not clamped at the top, so past max this is the
   * spacing the binade of x would have. NaN and inf give NaN. */
  function ulp(spec, x) {
    const f = format(spec);
    const a = Math.abs(parseValue(x));
    if (!Number.isFinite(a)) return NaN;
    // a float64 subnormal has an exponent below -1022, far below any emin the page accepts
    const e = a > 0 ? Math.max(biasedExponent64(a) - 1023, f.emin) : f.emin;
    return pow2(e - f.manBits);
  }

  /** A dyadic rational in [0, 1] as [numerator, log2 of the denominator] (BigInt, Number). */
  function dyadicFraction(p) {
    if (p === 0) return [0n, 0];
    const [sig, k] = dyadic(p);
    return k >= 0 ? [sig << BigInt(k), 0] : [sig, -k];
  }

  /** The exact decimal expansion of num / 2**d (every such number has a finite one). */
  function dyadicDecimal(num, d) {
    if (d === 0) return num.toString();
    let digits = (num * 5n ** BigInt(d)).toString();
    if (digits.length <= d) digits = "0".repeat(d - digits.length + 1) + digits;
    const whole = digits.slice(0, digits.length - d);
    const frac = digits.slice(digits.length - d).replace(/0+$/, "");
    return whole + (frac ? "." + frac : "");
  }

  /** A probability num / 2**d as the page writes it: a fraction, reduced (num is odd), with
   * its decimal value when that is not the fraction itself. */
  function probabilityText(num, d) {
    if (d === 0) return num.toString();
    const denominator = d <= 16 ? String(2 ** d) : `2^${d}`;
    const decimal = dyadicDecimal(num, d);
    return decimal.length <= 12 ? `${num}/${denominator} = ${decimal}` : `${num}/${denominator} ≈ ${Number(Number(decimal).toPrecision(6))}`;
  }

  /** Where x falls on the grid, as round_to's stochastic mode sees it (_round_chunk, or
   * _round_power_of_two_chunk for e8m0fnu-style formats): the grid value at or below |x| and
   * the one above it, both with the sign of x and before the overflow rule, the results they
   * give once that rule (the format's, or saturating) is applied, and the probability that
   * stochastic rounding takes the upper one: the distance from the lower neighbour in units
   * of the spacing between the two, frac(|x| / q). That fraction is exact in float64 (the
   * scaling by q is a power of two, and the integer part is taken exactly), so the page writes
   * it, and 1 minus it, as exact fractions. round_to draws u uniformly in [0, 1) and goes up
   * when u < p. (numpy's generator gives u in multiples of 2**-53, so a p below 2**-53 is drawn
   * as if it were 2**-53; the page gives the probability of the definition.) */
  function neighbours(spec, x, saturate) {
    const f = format(spec);
    const xv = parseValue(x);
    const sat = Boolean(saturate);
    const negative = signbit(xv);
    const a = Math.abs(xv);
    let lowerRaw;
    let upperRaw;
    let p = 0; // the probability of the upper neighbour
    if (Number.isNaN(xv) || (f.specials === "power_of_two" && !(xv > 0))) {
      lowerRaw = upperRaw = NaN; // no neighbours: NaN for sure
    } else if (a === Infinity) {
      lowerRaw = upperRaw = a; // beyond every value: what the format makes of inf
    } else if (f.specials === "power_of_two") {
      // the power of two at or below x (a float64 subnormal: from its exact dyadic form)
      const [sig, k] = dyadic(a);
      const low = pow2(k + sig.toString(2).length - 1);
      lowerRaw = low;
      upperRaw = 2 * low;
      p = (a - low) / low; // exact: a - low is exact (Sterbenz), low a power of two
    } else {
      const m = f.manBits;
      const e = Math.min(Math.max(biasedExponent64(a) - 1023, f.emin), f.emax + 1);
      const y = a * pow2(m - e); // |x| / q, exact
      if (y === Infinity) {
        lowerRaw = upperRaw = Infinity; // |x| / q overflows float64: far beyond max
      } else {
        const low = Math.floor(y);
        p = y - low; // exact: low and y lie in the same binade, or low is 0
        lowerRaw = low * pow2(e - m);
        upperRaw = (low + 1) * pow2(e - m);
      }
    }
    const settle = (r) => {
      if (f.specials === "power_of_two") {
        if (Number.isNaN(r)) return NaN;
        r = Math.max(r, f.smallestNormal); // no zero: tiny values land on 2**emin
        return r > f.max ? (sat ? f.max : NaN) : r;
      }
      if (r > f.max) r = overflowValue(f, sat);
      return negative ? -r : r; // copysign(r, x)
    };
    const outcome = (raw) => {
      const value = settle(raw);
      const code = encodeValue(f, value, negative);
      return {
        raw: f.signed && negative ? -raw : raw,
        value,
        code,
        hex: code === null ? null : hex(f, code),
        cls: code === null ? "NaN" : decode(f, code).cls,
      };
    };
    const [num, d] = dyadicFraction(p);
    return {
      x: xv,
      ulp: ulp(f, xv),
      lower: outcome(lowerRaw),
      upper: outcome(upperRaw),
      p,
      pExact: dyadicDecimal(num, d),
      pText: probabilityText(num, d),
      qExact: dyadicDecimal((1n << BigInt(d)) - num, d), // 1 - p, exactly
      qText: probabilityText((1n << BigInt(d)) - num, d),
      onGrid: p === 0,
    };
  }

  // ------------------------------------------------------------------ the page
  const SVG = "http://www.w3.org/2000/svg";

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") node.className = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v);
    }
    for (const child of children) node.append(child);
    return node;
  }

  function svgEl(tag, attrs) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    return node;
  }

  /** A float64 as the page shows it: the shortest text that reads back as the same number. */
  function show(v) {
    if (v === null || v === undefined) return "none";
    if (Number.isNaN(v)) return "NaN";
    if (v === Infinity) return "inf";
    if (v === -Infinity) return "-inf";
    if (Object.is(v, -0)) return "-0";
    return String(v);
  }

  /** A positive power of two as 2^k, else nothing. */
  function powerOfTwo(v) {
    if (!(v > 0) || !Number.isFinite(v)) return "";
    const [sig, k] = dyadic(v);
    return sig === 1n ? `2^${k}` : "";
  }

  function shortNumber(v) {
    if (!Number.isFinite(v)) return show(v);
    return Number(v.toPrecision(6)).toString();
  }

  const MODE_NAMES = {
    nearest_even: "nearest even",
    nearest_away: "nearest away",
    toward_zero: "toward zero",
    stochastic: "stochastic",
  };
  const DEFAULT_X = "3.14159";
  // the smallest scale the grid is drawn at: its 11-unit labels stay at least 9 CSS px tall
  const GRID_MIN_SCALE = 0.825;
  const ROUND_COLUMNS = ["result", "code", "class", "absolute error", "relative error", "given by", "stochastic: probability"];

  /** The state a link can name, from the part of the address after # (fmt=e4m3fn&code=0x7E,
   * or e=4&m=3&bias=8&specials=fn for a format by its fields; x=464; mode=nearest_away), or
   * null when the address names none (a heading's anchor, or nothing). */
  function stateFromHash(hash) {
    const text = (hash || "").replace(/^#/, "");
    if (!text.includes("=")) return null;
    const params = new URLSearchParams(text);
    const out = {};
    for (const key of ["fmt", "e", "m", "bias", "specials", "code", "x", "mode"]) {
      if (params.has(key)) out[key] = params.get(key);
    }
    return out;
  }

  function build(root) {
    const state = { fmt: format("bf16"), code: 0x3f80, mode: "nearest_even", loaded: false };

    /** The box of one part of the explorer: the page declares it under its heading (explorer.md,
     * so that the headings are in the page's contents); on a page without it, a box of its own
     * under a heading of its own, at the end of the explorer's box. */
    function part(id, headingId, title) {
      const declared = document.getElementById(id);
      if (declared) return declared;
      const box = el("div", { id, class: "fx-part" });
      root.append(el("h2", { id: headingId }, title), box);
      return box;
    }

    // --- the format: a preset, or its fields
    const preset = el("select", { id: "fx-preset", "aria-label": "preset" });
    for (const name of Object.keys(PRESETS)) preset.append(el("option", { value: name }, name));
    preset.append(el("option", { value: "custom" }, "custom"));
    const expInput = el("input", { id: "fx-exp", type: "number", min: "1", max: "8", step: "1" });
    const manInput = el("input", { id: "fx-man", type: "number", min: "0", max: "23", step: "1" });
    const biasInput = el("input", { id: "fx-bias", type: "number", min: `-${MAX_BIAS}`, max: `${MAX_BIAS}`, step: "1" });
    const specialsInput = el("select", { id: "fx-specials", "aria-label": "specials" });
    for (const [key, text] of Object.entries({
      ieee: "IEEE: inf and NaN",
      fn: "fn: no inf, one NaN code",
      finite: "fn: no inf, no NaN",
      power_of_two: "fnu: unsigned powers of two",
    })) {
      specialsInput.append(el("option", { value: key }, text));
    }
    const problem = el("p", { id: "fx-problem", class: "fx-problem", role: "alert" });
    const specialsLine = el("p", { id: "fx-specials-text", class: "fx-note" });

    root.append(
      el(
        "div",
        { class: "fx-controls" },
        el("label", {}, "Preset ", preset),
        el("label", {}, "exponent bits ", expInput),
        el("label", {}, "mantissa bits ", manInput),
        el("label", {}, "bias ", biasInput),
        el("label", {}, "specials ", specialsInput)
      ),
      problem,
      specialsLine
    );

    // --- the code: its bits, hex, value
    const bitsRow = el("div", { id: "fx-bits", class: "fx-bits" });
    const hexInput = el("input", { id: "fx-hex", type: "text", spellcheck: "false", "aria-label": "code in hex" });
    const value = el("output", { id: "fx-value", class: "fx-value" });
    const cls = el("output", { id: "fx-class", class: "fx-class" });
    const formula = el("div", { id: "fx-formula", class: "fx-note" });
    const exact = el("span", { id: "fx-exact", class: "fx-exact" });
    const codeUlp = el("span", { id: "fx-code-ulp", class: "fx-exact" });
    const step = (d) => () => {
      const n = 2 ** state.fmt.bits;
      setCode((state.code + d + n) % n);
    };
    part("fx-part-bits", "fx-bits-heading", "The bits").append(
      el("p", { class: "fx-note" }, "Click a bit to flip it, or type a code in hex."),
      bitsRow,
      el(
        "div",
        { class: "fx-code" },
        el("label", {}, "code ", hexInput),
        el("button", { type: "button", id: "fx-down", onclick: step(-1), title: "previous code" }, "−1"),
        el("button", { type: "button", id: "fx-up", onclick: step(1), title: "next code" }, "+1"),
        el("span", {}, " value "),
        value,
        el("span", {}, " "),
        cls
      ),
      formula,
      el("div", { class: "fx-note" }, "exactly: ", exact),
      el("div", { class: "fx-note" }, "ulp (the spacing of the values in this binade): ", codeUlp)
    );

    // --- key numbers and the grid
    const keyTable = el("table", { id: "fx-key", class: "fx-table" });
    const grid = el("div", { id: "fx-grid" });
    part("fx-part-key", "fx-key-heading", "Key numbers").append(el("div", { class: "fx-scroll" }, keyTable));
    part("fx-part-grid", "fx-grid-heading", "Every positive value").append(grid);

    // --- rounding
    const xInput = el("input", { id: "fx-x", type: "text", value: DEFAULT_X, spellcheck: "false", "aria-label": "x" });
    const modeInput = el("select", { id: "fx-mode", "aria-label": "rounding mode" });
    for (const mode of [...MODES, "stochastic"]) modeInput.append(el("option", { value: mode }, MODE_NAMES[mode]));
    const xExact = el("span", { id: "fx-x-exact", class: "fx-exact" });
    const between = el("div", { id: "fx-between", class: "fx-between" });
    const roundTable = el("table", { id: "fx-round", class: "fx-table" });
    part("fx-part-rounding", "fx-rounding-heading", "Rounding a value").append(
      el(
        "p",
        { class: "fx-note" },
        "Type a number (1e-3, -448, inf, nan...). It is first read as a float64, the nearest one ",
        "to what you typed, as Python's float() reads it; then rounded to the format in each mode. ",
        "The table has one row per distinct result, with the modes that give it and the probability ",
        "that stochastic rounding gives it. Click a result's code to show it in the bits above."
      ),
      el("div", { class: "fx-controls" }, el("label", {}, "x = ", xInput), el("label", {}, "mode to follow ", modeInput)),
      el("div", { class: "fx-note" }, "read as the float64 ", xExact),
      between,
      el("div", { class: "fx-scroll" }, roundTable)
    );

    function fail(message) {
      problem.textContent = message;
    }

    function readFormat() {
      try {
        const fmt = format({
          expBits: Number(expInput.value),
          manBits: Number(manInput.value),
          bias: Number(biasInput.value),
          specials: specialsInput.value,
        });
        fail("");
        return fmt;
      } catch (err) {
        fail(err.message);
        return null;
      }
    }

    function setFormat(fmt, code) {
      fail("");
      state.fmt = fmt;
      expInput.value = fmt.expBits;
      manInput.value = fmt.manBits;
      biasInput.value = fmt.bias;
      specialsInput.value = fmt.specials;
      preset.value = presetOf(fmt) || "custom";
      specialsLine.textContent = `${fmt.name}: ${fmt.bits} bits. ${SPECIALS[fmt.specials]}.`;
      showKeyNumbers();
      drawGrid();
      buildBits();
      setCode(code === undefined ? codeOfOne(fmt) : code);
      showRounding();
    }

    /** The code of 1.0 where the format has it, else the code of max. */
    function codeOfOne(fmt) {
      const one = round(fmt, 1, "nearest_even", true);
      return one.value === 1 ? one.code : round(fmt, fmt.max, "nearest_even", true).code;
    }

    /** The bit buttons of the format, built once per format and updated in place by setCode
     * (a button that is rebuilt under the pointer loses the click that pressed it). */
    function buildBits() {
      const f = state.fmt;
      bitsRow.replaceChildren();
      const groups = [];
      if (f.signed) groups.push(["sign", 1]);
      groups.push(["exponent", f.expBits]);
      if (f.manBits) groups.push(["mantissa", f.manBits]);
      let position = f.bits;
      for (const [kind, width] of groups) {
        const group = el("div", { class: `fx-group fx-${kind}`, "data-kind": kind, "data-low": String(position - width) });
        const row = el("div", { class: "fx-group-bits" });
        for (let i = width - 1; i >= 0; i--) {
          position -= 1;
          const at = position;
          row.append(
            el(
              "button",
              {
                type: "button",
                class: `fx-bit fx-bit-${kind}`,
                "data-bit": String(at),
                "data-field-bit": String(i),
                onclick: () => {
                  const bit = Math.floor(state.code / 2 ** at) % 2;
                  setCode(bit ? state.code - 2 ** at : state.code + 2 ** at);
                },
              },
              "0"
            )
          );
        }
        group.append(row, el("div", { class: "fx-group-label" }, kind));
        bitsRow.append(group);
      }
    }

    function setCode(code) {
      const f = state.fmt;
      state.code = code;
      const d = decode(f, code);
      const fieldsOf = { sign: d.sign, exponent: d.exponent, mantissa: d.mantissa };
      for (const group of bitsRow.querySelectorAll(".fx-group")) {
        const kind = group.dataset.kind;
        for (const button of group.querySelectorAll("button.fx-bit")) {
          const at = Number(button.dataset.bit);
          const bit = Math.floor(code / 2 ** at) % 2;
          button.textContent = String(bit);
          button.setAttribute("aria-pressed", bit ? "true" : "false");
          button.setAttribute("aria-label", `${kind} bit ${button.dataset.fieldBit} (code bit ${at}): ${bit}`);
        }
        group.querySelector(".fx-group-label").textContent = kind === "sign" ? "sign" : `${kind}: ${fieldsOf[kind]}`;
      }
      // always, also while the box has focus: a bit flipped by a click that left the focus in
      // the box (Safari and Firefox on macOS do not move it to a button) must show here
      hexInput.value = hex(f, code);
      value.textContent = show(d.value);
      value.dataset.value = show(d.value);
      cls.textContent = d.cls;
      cls.dataset.cls = d.cls;
      formula.textContent = formulaOf(f, d);
      exact.textContent = exactDecimal(d.value);
      const spacing = ulp(f, d.value);
      codeUlp.textContent = Number.isFinite(spacing) ? withPower(spacing) : "none (not a finite value)";
      codeUlp.dataset.value = show(spacing);
      markGrid(d.value);
      saveState();
    }

    /** A positive number, and its power of two where it is one. */
    function withPower(v) {
      const power = powerOfTwo(v);
      return power ? `${power} = ${show(v)}` : show(v);
    }

    function showKeyNumbers() {
      const f = state.fmt;
      const k = keyNumbers(f);
      const rows = [
        ["max", "largest finite value", k.max],
        ["smallestNormal", "smallest normal", k.smallestNormal],
        ["smallestSubnormal", "smallest subnormal", k.smallestSubnormal],
        ["eps", "eps: the gap from 1 to the next value (the ulp at 1)", k.eps],
        ["unitRoundoff", "unit roundoff u = eps/2: round-to-nearest's worst relative error (normal range)", k.unitRoundoff],
        ["finiteValues", "finite values (+0 and -0 count once)", k.finiteValues],
        ["emin", "exponent of the smallest normal, emin", k.emin],
        ["emax", "exponent of the largest binade, emax", k.emax],
      ];
      keyTable.replaceChildren(
        el("thead", {}, el("tr", {}, el("th", {}, "number"), el("th", {}, "value"), el("th", {}, "as a power of two")))
      );
      const body = el("tbody");
      for (const [key, label, v] of rows) {
        const cell = el("td", { class: "fx-num", "data-key": key, "data-value": show(v) }, show(v));
        const integer = key === "finiteValues" || key === "emin" || key === "emax";
        let power = integer ? "" : powerOfTwo(v);
        if (key === "max" && !power) power = `${exactDecimal(f.max * pow2(-f.emax))} × 2^${f.emax}`;
        body.append(el("tr", {}, el("td", {}, label), cell, el("td", {}, power)));
      }
      keyTable.append(body);
    }

    function drawGrid() {
      const f = state.fmt;
      grid.replaceChildren();
      grid.positions = null;
      if (f.bits > 8) {
        grid.append(
          el("p", { class: "fx-note" }, `${f.name} has ${k(finiteCount(f))} finite values: the grid is drawn for formats of at most 8 bits.`)
        );
        return;
      }
      const values = finiteValues(f, true).filter((v) => v > 0);
      // the axis's length in the drawing's units: about 12 per value, from 300 (e2m1fn's 7 values
      // fit a phone) to 760 (an fp8 format's 126 scroll sideways there)
      const width = Math.min(760, Math.max(300, 12 * values.length));
      const left = 20;
      const lo = Math.log2(values[0]);
      const hi = Math.log2(values[values.length - 1]);
      const span = hi - lo || 1;
      const x = (v) => left + ((Math.log2(v) - lo) / span) * width;
      const svg = svgEl("svg", {
        id: "fx-grid-svg",
        viewBox: `0 0 ${width + 2 * left} 100`,
        role: "img",
        "aria-label": `the ${values.length} positive finite values of ${f.name} on a log2 axis`,
      });
      // drawn at no less than GRID_MIN_SCALE of its size, so that its labels stay readable (on a
      // phone its box scrolls instead), and at no more than twice it
      svg.style.minWidth = `${Math.ceil((width + 2 * left) * GRID_MIN_SCALE)}px`;
      svg.style.maxWidth = `${2 * (width + 2 * left)}px`;
      svg.append(svgEl("line", { x1: left, x2: left + width, y1: 50, y2: 50, class: "fx-axis" }));
      // a label every few binades, at most about 12
      const stride = Math.max(1, Math.ceil(span / 12));
      for (let p = Math.ceil(lo); p <= Math.floor(hi); p++) {
        if ((p - Math.ceil(lo)) % stride !== 0) continue;
        const at = x(pow2(p));
        svg.append(svgEl("line", { x1: at, x2: at, y1: 50, y2: 56, class: "fx-axis" }));
        const label = svgEl("text", { x: at, y: 70, class: "fx-axis-label" });
        label.textContent = `2^${p}`;
        svg.append(label);
      }
      for (const v of values) {
        const subnormal = f.hasSubnormals && v < f.smallestNormal;
        const tick = svgEl("line", {
          x1: x(v),
          x2: x(v),
          y1: 22,
          y2: 48,
          class: subnormal ? "fx-tick fx-tick-subnormal" : "fx-tick",
          "data-value": show(v),
        });
        const title = svgEl("title");
        title.textContent = `${show(v)}${subnormal ? " (subnormal)" : ""}`;
        tick.append(title);
        tick.addEventListener("click", () => setCode(encodeValue(f, v, false)));
        svg.append(tick);
      }
      // the code's value above the axis, the typed x below it
      svg.append(svgEl("path", { id: "fx-grid-marker", d: "M -5 8 L 5 8 L 0 18 Z", class: "fx-marker" }));
      const xMark = svgEl("g", { id: "fx-grid-x", class: "fx-x-marker" });
      xMark.append(svgEl("line", { x1: 0, x2: 0, y1: 20, y2: 80 }), svgEl("path", { d: "M -5 92 L 5 92 L 0 82 Z" }));
      const xLabel = svgEl("text", { x: 8, y: 92, class: "fx-axis-label fx-x-label" });
      xLabel.textContent = "x";
      xMark.append(xLabel);
      svg.append(xMark);
      grid.append(
        // the box that scrolls sideways on a phone, not the note
        el("div", { id: "fx-grid-box", onscroll: (e) => markEdges(e.currentTarget) }, svg),
        el(
          "p",
          { class: "fx-note" },
          `${values.length} positive values` +
            (f.hasZero ? ", and zero (not on a log axis)" : "") +
            (f.hasSubnormals ? "; subnormals in a lighter colour" : "") +
            ". The triangle above the axis is the code shown in the bits; the line below it is |x|, the value typed " +
            "under “Rounding a value”, with its two neighbours drawn thicker. Click a value to show its code."
        )
      );
      grid.positions = x;
      grid.range = [values[0], values[values.length - 1]];
    }

    function markGrid(v) {
      const marker = document.getElementById("fx-grid-marker");
      if (!marker) return;
      const a = Math.abs(v);
      const shown = Number.isFinite(a) && a > 0;
      marker.style.display = shown ? "" : "none";
      if (!shown) return;
      marker.setAttribute("transform", `translate(${grid.positions(a)} 0)`);
      // on a narrow screen the grid scrolls sideways in its box: bring the marker into view
      // (centred) when it is outside, and leave the box alone when it is already in view
      const scroller = document.getElementById("fx-grid-box");
      const box = scroller.getBoundingClientRect();
      const at = marker.getBoundingClientRect();
      if (box.width > 0 && (at.left < box.left || at.right > box.right)) {
        scroller.scrollLeft += (at.left + at.right) / 2 - (box.left + box.right) / 2;
      }
      markEdges(scroller);
    }

    /** |x| on the grid, its neighbours' ticks drawn thicker (where |x| lies inside the grid). */
    function markX(n) {
      const mark = document.getElementById("fx-grid-x");
      if (!mark) return;
      for (const tick of grid.querySelectorAll(".fx-tick-neighbour")) tick.classList.remove("fx-tick-neighbour");
      const a = Math.abs(n ? n.x : NaN);
      const inside = Number.isFinite(a) && a >= grid.range[0] && a <= grid.range[1];
      mark.style.display = inside ? "" : "none";
      mark.dataset.x = inside ? String(grid.positions(a)) : "";
      if (!inside) return;
      mark.setAttribute("transform", `translate(${grid.positions(a)} 0)`);
      for (const raw of [n.lower.raw, n.upper.raw]) {
        const tick = grid.querySelector(`.fx-tick[data-value="${show(Math.abs(raw))}"]`);
        if (tick) tick.classList.add("fx-tick-neighbour");
      }
    }

    /** One row per distinct result of rounding x: the modes (and overflow rules) that give it,
     * and the probability that stochastic rounding gives it under each rule. */
    function roundingRows(f, xv) {
      const rows = new Map();
      const rowOf = (r) => {
        const key = `${show(r.value)}|${r.code}`;
        if (!rows.has(key)) rows.set(key, { result: r, ways: [], p: { format: null, saturating: null } });
        return rows.get(key);
      };
      for (const mode of MODES) {
        for (const saturate of [false, true]) {
          rowOf(round(f, xv, mode, saturate)).ways.push([mode, saturate]);
        }
      }
      const stochastic = {};
      for (const saturate of [false, true]) {
        const n = neighbours(f, xv, saturate);
        stochastic[saturate] = n;
        const rule = saturate ? "saturating" : "format";
        const outcomes = [
          [n.lower, n.qExact, n.qText, n.p < 1],
          [n.upper, n.pExact, n.pText, n.p > 0],
        ];
        const lowerKey = `${show(n.lower.value)}|${n.lower.code}`;
        const upperKey = `${show(n.upper.value)}|${n.upper.code}`;
        if (lowerKey === upperKey) {
          outcomes.splice(0, 2, [n.lower, "1", "1", true]); // both neighbours give one result
        }
        for (const [o, exactP, text, possible] of outcomes) {
          if (!possible) continue;
          const [absError, relError] = errorsOf(xv, o.value);
          const row = rowOf({ ...o, x: xv, absError, relError });
          row.ways.push(["stochastic", saturate]);
          row.p[rule] = { exact: exactP, text };
        }
      }
      return { rows: [...rows.values()].sort((a, b) => order(a.result.value) - order(b.result.value)), stochastic };
    }

    /** Results in the order of the number line, NaN last. */
    function order(v) {
      return Number.isNaN(v) ? Infinity : v;
    }

    /** "nearest even, toward zero (saturating)": the modes of a row, each once. */
    function waysText(ways, overflow) {
      const parts = [];
      for (const mode of [...MODES, "stochastic"]) {
        const rules = ways.filter(([m]) => m === mode).map(([, s]) => s);
        if (rules.length === 2) parts.push(MODE_NAMES[mode]);
        else if (rules.length === 1) parts.push(`${MODE_NAMES[mode]} (${rules[0] ? "saturating" : overflow})`);
      }
      return parts.join(", ");
    }

    /** The sides past which the grid's box hides more of the grid (data-fade: "left", "right",
     * both or none), which explorer.css fades out so that a reader sees there is more. */
    function markEdges(box) {
      const hidden = box.scrollWidth - box.clientWidth;
      const sides = [];
      if (hidden > 1 && box.scrollLeft > 1) sides.push("left");
      if (hidden > 1 && box.scrollLeft < hidden - 1) sides.push("right");
      box.dataset.fade = sides.join(" ");
    }
    window.addEventListener("resize", () => {
      const box = document.getElementById("fx-grid-box");
      if (box) markEdges(box);
    });

    /** Text that does not break inside (explorer.css, .fx-whole): a probability's overflow rule,
     * in a cell where an exact fraction may break anywhere. */
    function whole(text) {
      return el("span", { class: "fx-whole" }, text);
    }


    function showRounding() {
      const f = state.fmt;
      let xv;
      try {
        xv = parseValue(xInput.value);
      } catch (err) {
        xExact.textContent = err.message;
        roundTable.replaceChildren();
        between.replaceChildren();
        markX(null);
        saveState();
        return;
      }
      xExact.textContent = exactDecimal(xv);
      const overflow = {
        ieee: "overflow to inf",
        fn: "overflow to NaN",
        finite: "saturates",
        power_of_two: "overflow to NaN",
      }[f.specials];
      const { rows, stochastic } = roundingRows(f, xv);
      showNeighbours(f, stochastic[false]);
      roundTable.replaceChildren(
        el(
          "thead",
          {},
          el(
            "tr",
            {},
            ...ROUND_COLUMNS.map((h) => el("th", {}, h))
          )
        )
      );
      const body = el("tbody");
      for (const { result: r, ways, p } of rows) {
        const codeCell = el("td", { class: "fx-num fx-code-cell" });
        if (r.code === null) {
          codeCell.textContent = "none (no NaN code)";
        } else {
          codeCell.append(el("button", { type: "button", class: "fx-code-link", onclick: () => setCode(r.code) }, r.hex));
        }
        const pFormat = p.format ? p.format.exact : "0";
        const pSaturating = p.saturating ? p.saturating.exact : "0";
        const pText = (q) => (q ? q.text : "0");
        // an exact fraction may break anywhere (explorer.css), the overflow rule after it nowhere
        const probability =
          pFormat === pSaturating
            ? [pText(p.format)]
            : [pText(p.format), " ", whole(`(${overflow})`), "; ", pText(p.saturating), " ", whole("(saturating)")];
        const tokens = ways.map(([m, s]) => `${m}/${s ? "saturating" : "format"}`);
        body.append(
          el(
            "tr",
            {
              class: ways.some(([m, s]) => m === state.mode && !s) ? "fx-round-row fx-selected" : "fx-round-row",
              "data-ways": tokens.join(" "),
              "data-p-format": pFormat,
              "data-p-saturating": pSaturating,
            },
            el("td", { class: "fx-num fx-result", "data-value": show(r.value), title: exactDecimal(r.value) }, show(r.value)),
            codeCell,
            el("td", { class: "fx-cls" }, r.cls),
            el("td", { class: "fx-num fx-error", title: show(r.absError) }, shortNumber(r.absError)),
            el("td", { class: "fx-num fx-error", title: show(r.relError) }, shortNumber(r.relError)),
            el("td", { class: "fx-ways" }, waysText(ways, overflow)),
            el("td", { class: "fx-num fx-probability" }, ...probability)
          )
        );
      }
      // each cell names its column, for the narrow layout where a row is a card (explorer.css)
      for (const row of body.rows) {
        [...row.cells].forEach((cell, i) => cell.setAttribute("data-label", ROUND_COLUMNS[i]));
      }
      roundTable.append(body);
      saveState();
    }

    /** The ulp at x and the two grid values around it, with their codes. */
    function showNeighbours(f, n) {
      between.replaceChildren();
      markX(n);
      const spacing = el("span", { id: "fx-ulp", class: "fx-exact", "data-value": show(n.ulp) });
      spacing.textContent = Number.isFinite(n.ulp) ? withPower(n.ulp) : "none (x is not finite)";
      const line = el("div", { class: "fx-note" }, "ulp at x: ", spacing);
      if (Number.isFinite(n.x) && Math.abs(n.x) > f.max) line.append(" (x is past max: the spacing its binade would have)");
      between.append(line);
      if (Number.isNaN(n.lower.raw) || !Number.isFinite(n.lower.raw)) {
        between.append(el("div", { class: "fx-note", id: "fx-neighbours" }, "x has no neighbours on the grid."));
        return;
      }
      const side = (o, id) => {
        const span = el("span", { id, class: "fx-exact", "data-value": show(o.raw) }, show(o.raw));
        if (o.value !== o.raw && !(Number.isNaN(o.value) && Number.isNaN(o.raw))) {
          span.append(` (past max: ${show(o.value)} with the format's overflow)`);
        }
        return span;
      };
      between.append(
        el(
          "div",
          { class: "fx-note", id: "fx-neighbours" },
          ...(n.onGrid
            ? ["x is on the grid: every mode gives ", side(n.lower, "fx-lower"), "; the next value out is ", side(n.upper, "fx-upper")]
            : ["x lies between its neighbours ", side(n.lower, "fx-lower"), " and ", side(n.upper, "fx-upper")])
        )
      );
    }

    function k(n) {
      return n.toLocaleString("en-US");
    }

    // --- the address: the state a link can name, kept up to date with history.replaceState
    function saveState() {
      if (!state.loaded) return;
      const params = new URLSearchParams();
      const name = presetOf(state.fmt);
      if (name) {
        params.set("fmt", name);
      } else {
        params.set("e", state.fmt.expBits);
        params.set("m", state.fmt.manBits);
        params.set("bias", state.fmt.bias);
        params.set("specials", state.fmt.specials);
      }
      params.set("code", hex(state.fmt, state.code));
      params.set("x", xInput.value.trim());
      params.set("mode", state.mode);
      const hash = "#" + params.toString();
      if (window.location.hash === hash) return;
      try {
        history.replaceState(history.state, "", hash);
      } catch (err) {
        // a browser that limits how often a page may rewrite its address: the page works on
      }
    }

    /** Show the state an address names; what it leaves out keeps the page's defaults, and what
     * the page cannot show is said in the problem line. */
    function loadState(s) {
      const problems = [];
      let fmt = format("bf16");
      try {
        let spec = { expBits: 8, manBits: 7, specials: "ieee" };
        if (s.fmt !== undefined) {
          if (!Object.hasOwn(PRESETS, s.fmt)) throw new Error(`unknown format ${s.fmt}`);
          const [e, m, sp] = PRESETS[s.fmt];
          spec = { expBits: e, manBits: m, specials: sp };
        }
        if (s.e !== undefined) spec.expBits = Number(s.e);
        if (s.m !== undefined) spec.manBits = Number(s.m);
        if (s.specials !== undefined) spec.specials = s.specials;
        if (s.bias !== undefined) spec.bias = Number(s.bias);
        fmt = format(spec);
      } catch (err) {
        problems.push(err.message);
      }
      if (s.x !== undefined) xInput.value = s.x;
      if (s.mode !== undefined) {
        if ([...MODES, "stochastic"].includes(s.mode)) state.mode = s.mode;
        else problems.push(`unknown rounding mode ${s.mode}`);
      }
      modeInput.value = state.mode;
      let code;
      if (s.code !== undefined) {
        const text = s.code.trim().replace(/^0x/i, "");
        const c = /^[0-9a-f]+$/i.test(text) ? parseInt(text, 16) : NaN;
        if (Number.isInteger(c) && c < 2 ** fmt.bits) code = c;
        else problems.push(`a code of ${fmt.name} is a hex number from 0 to ${hex(fmt, 2 ** fmt.bits - 1)}`);
      } else if (s.x !== undefined) {
        // no code named: the code x rounds to, in the mode followed
        try {
          const mode = state.mode === "stochastic" ? "nearest_even" : state.mode;
          code = round(fmt, parseValue(s.x), mode, false).code ?? undefined;
        } catch (err) {
          code = undefined;
        }
      }
      setFormat(fmt, code);
      fail(problems.join("; "));
    }

    preset.addEventListener("change", () => {
      if (preset.value === "custom") return;
      setFormat(format(preset.value), undefined);
    });
    for (const input of [expInput, manInput, specialsInput, biasInput]) {
      input.addEventListener("change", () => {
        if (input === expInput) biasInput.value = standardBias(Number(expInput.value));
        if (input === specialsInput && specialsInput.value === "power_of_two") manInput.value = 0;
        const fmt = readFormat();
        if (fmt) setFormat(fmt, undefined);
      });
    }
    hexInput.addEventListener("change", () => {
      const text = hexInput.value.trim().replace(/^0x/i, "");
      const code = /^[0-9a-f]+$/i.test(text) ? parseInt(text, 16) : NaN;
      if (Number.isInteger(code) && code < 2 ** state.fmt.bits) {
        fail("");
        setCode(code);
      } else {
        fail(`a code of ${state.fmt.name} is a hex number from 0 to ${hex(state.fmt, 2 ** state.fmt.bits - 1)}`);
      }
      hexInput.value = hex(state.fmt, state.code);
    });
    xInput.addEventListener("input", showRounding);
    modeInput.addEventListener("change", () => {
      state.mode = modeInput.value;
      showRounding();
    });
    // a link on the page, or an address typed by hand, that names another state
    window.addEventListener("hashchange", () => {
      const s = stateFromHash(window.location.hash);
      if (s) loadState(s);
    });

    const named = stateFromHash(window.location.hash);
    if (named) loadState(named);
    else setFormat(state.fmt, state.code);
    state.loaded = true;
    root.dataset.ready = "true";
    if (named) showNamedSection(named);

    /** An address that names a value opens at the rounding of it; one that names only a code,
     * at the bits (once, as the page loads: a later change of state leaves the scroll alone). */
    function showNamedSection(s) {
      const id = s.x !== undefined ? "fx-rounding-heading" : s.code !== undefined ? "fx-bits-heading" : null;
      if (!id) return;
      const heading = document.getElementById(id);
      heading.scrollIntoView({ block: "start" });
      // the images and fonts that load after the script can move the heading: scroll again then,
      // unless the reader has scrolled meanwhile
      if (document.readyState !== "complete") {
        const at = window.scrollY;
        window.addEventListener("load", () => {
          if (Math.abs(window.scrollY - at) < 2) heading.scrollIntoView({ block: "start" });
        }, { once: true });
      }
    }
  }

  window.explorer = {
    PRESETS,
    MODES,
    format,
    keyNumbers,
    decode,
    round,
    ulp,
    neighbours,
    finiteValues,
    exactDecimal,
    show,
  };

  function start() {
    const root = document.getElementById("float-explorer");
    if (root) build(root);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
