"""How the model's facts are spelled in the languages opgen writes: C++
types and expressions, Python literals and parameters, the torch schema.
The templates read these through the context (context.py); each spelling
has one home here."""


def comma_list(items):
    return ', '.join(items)


def py_tuple(items):
    """Python source of a tuple of the given item sources: (), (a,), (a, b)."""
    items = list(items)
    return '(' + items[0] + ',)' if len(items) == 1 else '(' + comma_list(items) + ')'


def float_literal(v, single):
    """A literal that reads back to exactly `v` (in f32 when `single`), in C++ and Python."""
    s = '%.9g' % v if single else '%.17g' % v
    return s if any(c in s for c in '.en') else s + '.0'


INT64_MIN = -(2**63)


def int_cpp(v):
    """An integer as C++ source: -2^63 has no literal (2^63 does not fit), so it is an expression."""
    return '(-9223372036854775807 - 1)' if v == INT64_MIN else str(v)


def bound_cpp(v):
    """A range bound as a C++ literal (an expression for -2^63)."""
    if v is None:
        return None
    if isinstance(v, int):
        return int_cpp(v)
    return float_literal(v, False)


def attr_literal(attr_type, v):
    """An attribute value as (Python source, torch schema default)."""
    if isinstance(v, bool):
        t = 'True' if v else 'False'
        return t, t
    if isinstance(v, int):
        return str(v), str(v)
    if isinstance(v, float):
        t = float_literal(v, attr_type == 'f32')
        return t, t
    if isinstance(v, str):
        # Enum values are snake_case names: nothing to escape.
        return "'" + v + "'", '"' + v + '"'
    items = [str(x) for x in v]
    # A tuple, so that a default is never a shared mutable list.
    return py_tuple(items), '[' + comma_list(items) + ']'


def torch_schema(op, lowered, attr_types, dtypes):
    """The torch.library schema: tensors positional, attributes keyword-only
    with their defaults, e.g. "simple_add(Tensor a, Tensor b, *, float alpha=1.0) -> Tensor".
    A tensor updated in place is a mutable alias, `Tensor(a!)`; torch custom ops
    may not return it, so only the other outputs are returned. The lowered
    schema is what the stable-ABI kernel registers when the op has attributes
    that ABI cannot carry on torch 2.9 (str, int[]): an enum as its index, an
    array as a CPU tensor."""
    s = op['name'] + ('__lowered(' if lowered else '(')
    alias_set = ord('a')
    mutated = {o['alias'] for o in op['outputs'] if o['alias']}
    params = []
    for t in op['inputs']:
        kind = 'Tensor'
        if t['name'] in mutated:
            kind = 'Tensor(%s!)' % chr(alias_set)
            alias_set += 1
        params.append(kind + ('?' if t['optional'] else '') + ' ' + t['name'] + ('=None' if t['optional'] else ''))
    s += ', '.join(params)
    requests = [o for o in op['outputs'] if o['on_request']]
    if op['attrs'] or requests:
        s += ', *'
    for a in op['attrs']:
        if lowered and a['type'] == 'enum':
            s += ', int ' + a['name']
        elif lowered and a['array']:
            s += ', Tensor ' + a['name']
        else:
            s += ', ' + attr_types[a['type']]['torch_schema'] + ' ' + a['name']
            if a['has_default'] and a['type'] == 'dtype':
                s += '=' + dtypes[a['default']]['torch']  # a ScalarType by its name: float8_e4m3fn
            elif a['has_default']:
                s += '=' + attr_literal(a['type'], a['default'])[1]
    # An output on request is asked for by a flag; not asked, it is returned
    # with no elements (a custom op returns no Tensor?).
    for o in requests:
        s += ', bool ' + request_param(o['name']) + '=False'
    s += ') -> '
    fresh = sum(1 for o in op['outputs'] if not o['alias'])
    return s + ('Tensor' if fresh == 1 else '(' + ', '.join(['Tensor'] * fresh) + ')')


def request_param(output):
    """The keyword that asks for an optional output: return_<name>."""
    return 'return_' + output


def state_names(platform):
    """The C++ names of an op's state on `platform` (`state:`): the type the
    body defines, the function that makes it, and the field of Args that holds it."""
    prefix = {'cpu': 'Cpu', 'cuda': 'Cuda'}[platform]
    return {'platform': platform, 'type': prefix + 'State', 'make': 'make_' + platform + '_state',
            'field': platform + '_state'}


def declared_shape(t):
    """A tensor's shape as the spec writes it: [..., N, 2*D]."""
    out = '['
    if t['batch']:
        out += '...' if not t['dims'] else '..., '
    return out + ', '.join(d['text'] for d in t['dims']) + ']'


def binding_place(op, symbol):
    """Where a shape symbol gets its value, as messages say it: "input 'x'
    dimension 0 after its '...'"."""
    t = op['inputs'][symbol['input']]
    return "input '%s' dimension %d%s" % (t['name'], symbol['axis'], " after its '...'" if t['batch'] else '')


def dtype_enum(name):
    """A dtype's enumerator of opgen::DType: f32 -> kF32, bool -> kBool."""
    return 'kBool' if name == 'bool' else 'k' + name.upper()


def hex64(v):
    return '0x%016X' % v  # ruff's spelling: upper-case digits
