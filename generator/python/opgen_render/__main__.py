"""opgen's renderer as a process of its own, run by the Python of the environment that opgen
serves (generator/renderer.cc chooses it and starts it):

    python -m opgen_render --templates DIR [--cache DIR]

It loads Jinja2 and the templates' environment at once, while opgen reads the specs, then
reads one request from stdin, a JSON document:

    {"plan": {package, ops, dtypes, attr_types, package_files, op_files, manifest}, "jobs": N}
        every file of a package: the checked model's facts (generator/template_data.cc)
        and the table of outputs (generator/outputs.cc), as plan.Plan takes them
    {"render": {"templates": [NAME, ...], "values": {KEY: TEXT}}}
        templates that read plain values (the skeletons of `opgen new` and `opgen init`)

and answers on stdout with records, each a header line `TAG LENGTH` and LENGTH bytes:
`P` the plan, a JSON object {"paths": [...], "workers": N}, sent before any file; `F` one
rendered file, in plan (or request) order; `E` an error that ends the run, a message for
opgen to print. Anything else the process prints goes to stderr."""

import argparse
import json
import multiprocessing
import os
import sys

# Below this many files, forking workers costs more than it saves.
FORK_THRESHOLD = 200
# Files a worker takes at a time: few enough to balance the work (the package-wide
# modules take far longer than an op's file), enough to keep each hand-over cheap.
CHUNK = 8


def send(out, tag, data):
    out.write(b'%s %d\n' % (tag, len(data)))
    out.write(data)


def missing_jinja2():
    return (f"Jinja2 is not installed for {sys.executable} (Python {sys.version.split()[0]}), the Python "
            f"that renders opgen's templates: install it there ({sys.executable} -m pip install jinja2), "
            "or set OPGEN_PYTHON to a Python that has it")


_plan = None  # the plan of this run, inherited by the forked workers


def _render(index):
    """(True, text) or (False, message): an exception would lose its template and path."""
    try:
        return True, _plan.render(index).encode()
    except Exception as e:
        return False, (f"template {_plan.template(index)} failed for {_plan.paths[index]}: "
                       f"{type(e).__name__}: {e}")


def _die_with_parent():
    """A worker ends with the renderer, so that a killed opgen leaves no process behind."""
    import ctypes
    import signal
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:  # the renderer died before prctl
        os._exit(1)


def rendered(plan, workers):
    """Each file's (ok, text or message), in plan order; from forked workers when `workers` > 1."""
    global _plan
    _plan = plan
    if workers == 1:
        yield from map(_render, range(len(plan)))
        return
    with multiprocessing.get_context('fork').Pool(workers, initializer=_die_with_parent) as pool:
        yield from pool.imap(_render, range(len(plan)), chunksize=CHUNK)


def answer(request, env, out):
    """Sends the records that answer `request`; returns the exit status."""
    if 'render' in request:
        values = request['render']['values']
        for name in request['render']['templates']:
            try:
                text = env.get_template(name).render(**values)
            except Exception as e:
                send(out, b'E', f"template {name} failed: {type(e).__name__}: {e}".encode())
                return 1
            send(out, b'F', text.encode())
        return 0
    from .plan import Plan
    try:
        plan = Plan(env, **request['plan'])
    except Exception as e:
        send(out, b'E', f"cannot plan the files: {type(e).__name__}: {e}".encode())
        return 1
    workers = max(1, min(request['jobs'], len(plan))) if len(plan) >= FORK_THRESHOLD else 1
    send(out, b'P', json.dumps({'paths': plan.paths, 'workers': workers}).encode())
    for ok, data in rendered(plan, workers):
        if not ok:
            send(out, b'E', data.encode())
            return 1
        send(out, b'F', data)
    return 0


def main():
    parser = argparse.ArgumentParser(prog='python -m opgen_render')
    parser.add_argument('--templates', required=True)
    parser.add_argument('--cache', help="where compiled templates are kept (none when absent)")
    args = parser.parse_args()
    # The folder opgen runs in (python -m puts it first on the path): a module there
    # (a project's json.py, say) must not stand in for the standard library's.
    if sys.path and sys.path[0] == os.getcwd():
        del sys.path[0]
    # The records own stdout; whatever else is printed goes to stderr.
    out = os.fdopen(os.dup(1), 'wb', buffering=1 << 16)
    os.dup2(2, 1)
    try:
        from . import environment
    except ImportError as e:
        send(out, b'E', (missing_jinja2() if e.name and e.name.split('.')[0] in ('jinja2', 'markupsafe')
                         else f"cannot load opgen_render: {e}").encode())
        out.flush()
        return 1
    env = environment.make_environment(args.templates, args.cache)
    status = answer(json.load(sys.stdin.buffer), env, out)
    out.flush()
    return status


if __name__ == '__main__':
    sys.exit(main())
