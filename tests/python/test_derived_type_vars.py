"""A spec whose statistics type is derived from its input's (S: {from: T,
map: ...}), as a layer norm's mean and rstd are, without a dtype attribute:
what opgen generates for it (the kernel interface Args<T, S>, run_cpu<T, S>,
Instantiations over T alone, select deriving S, the Python description), the
generated header and rules compiling against a body, and the Python checker
giving each output the dtype S takes for T (and refusing an input of dtype S
that T does not give), on the package's op of this shape."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
OPGEN = Path(os.environ.get("OPGEN_BINARY", REPO / "build" / "generator" / "opgen")).resolve()
PACKAGE = "derived_pkg"

if not OPGEN.is_file():
    pytest.skip(f"no opgen binary at {OPGEN} (build it, or set OPGEN_BINARY)", allow_module_level=True)

SPECS = {
    "package": f"opgen: 1\npackage: {{name: {PACKAGE}, torch_namespace: derived_ns}}\n",
    "norm": """opgen: 1
name: norm
types:
  T: [f16, bf16, f32, f64]
  S: {from: T, map: {f16: f32, bf16: f32, f32: f32, f64: f64}}
inputs:
  x: {dtype: T, shape: [..., D]}
  shift: {dtype: S, shape: [D], optional: true}
outputs:
  out: {dtype: T, shape: [..., D]}
  mean: {dtype: S, shape: [...]}
workspace:
  partial: {dtype: S, shape: [...]}
platforms: [cpu]
""",
}
BODY = """#include "derived_pkg/norm.h"
namespace derived_pkg::norm {
template <typename T, typename S>
opgen::Status run_cpu(const Args<T, S>& args) { (void)args; return opgen::Status::Ok(); }
}  // namespace derived_pkg::norm
"""


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    root = tmp_path_factory.mktemp("derived")
    specs = root / "specs"
    specs.mkdir()
    for name, text in SPECS.items():
        (specs / f"{name}.yaml").write_text(text)
    out = root / "generated"
    subprocess.run([str(OPGEN), "generate", str(specs), "-o", str(out), "--templates", str(REPO / "templates"),
                    "--quiet"], check=True)
    return out


def test_the_kernel_interface_takes_every_variable_and_instantiates_t_alone(generated):
    header = (generated / "include" / PACKAGE / "norm.h").read_text()
    assert "template <typename T, typename S>\nstruct Args {" in header
    assert "  const S* shift;" in header and "  S* mean;" in header and "  S* partial;" in header
    assert ("using Instantiations = opgen::TypeList<Args<opgen::f16, float>, Args<opgen::bf16, float>, "
            "Args<float, float>, Args<double, double>>;") in header
    assert "template <typename T, typename S>\nopgen::Status run_cpu(const Args<T, S>& args);" in header
    assert "// S follows T: f16 -> f32, bf16 -> f32, f32 -> f32, f64 -> f64" in header
    rules = (generated / "include" / PACKAGE / "norm_rules.h").read_text()
    assert "const opgen::DType S_ = opgen::derived(T_, " in rules
    assert "b.dtype(1, \"shift\", S_);" in rules
    assert "return b.ok() ? T_i_ : -1;" in rules
    doc = (generated / "docs" / "norm.md").read_text()
    assert "`S` follows `T`: f16 -> f32, bf16 -> f32, f32 -> f32, f64 -> f64." in doc


def test_the_header_and_rules_compile_against_a_body(generated, tmp_path):
    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    source = tmp_path / "body.cc"
    source.write_text(BODY + f'#include "{PACKAGE}/norm_rules.h"\n'
                      "template opgen::Status derived_pkg::norm::run_cpu(const derived_pkg::norm::Args<double, double>&);\n"
                      "int select(opgen::Binder& b) { return derived_pkg::norm::Rules::select(b); }\n")
    subprocess.run([compiler, "-std=c++17", "-fsyntax-only", "-I", str(generated / "include"),
                    "-I", str(REPO / "runtime" / "include"), str(source)], check=True)


@pytest.mark.parametrize("t, s", [("float16", "float32"), ("bfloat16", "float32"), ("float32", "float32"),
                                  ("float64", "float64")])
def test_the_checker_derives_s_from_t(t, s):
    # The package's op of this shape (S: {from: T, ...}, and Q from a dtype attribute): the
    # checker asks its C++ rules, so it needs the built package.
    from opgen_ops import _ops, _spec

    op = _ops.dynamic_per_token_scaled_fp8_quant.OP

    def check(*inputs):  # each input a shape and a dtype name
        return _spec.check(op, [x and _spec._Shaped(*x) for x in inputs], {"out_dtype": "float8_e5m2"},
                           dtype_name=lambda x: x.dtype)

    call = check(((3, 8), t), None)
    assert call.dtypes == {"T": t, "S": s, "Q": "float8_e5m2"}
    assert call.output_dtypes == ("float8_e5m2", s)
    call = check(((3, 8), t), ((), s))
    assert call.output_shapes == ((3, 8), (3,))
    wrong = "float64" if s == "float32" else "float32"
    with pytest.raises(TypeError, match=rf"dynamic_per_token_scaled_fp8_quant: input 'scale_ub' has dtype {wrong}; "
                                        rf"the spec declares {s} \(convert it explicitly, e\.g\. "
                                        rf"x\.astype\(jnp\.{s}\)\)"):
        check(((3, 8), t), ((), wrong))
