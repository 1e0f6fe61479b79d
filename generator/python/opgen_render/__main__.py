"""opgen's renderer as a process of its own, run by the Python of the environment that opgen
serves (generator/rendering/renderer.cc chooses it and starts it):

    python -m opgen_render TEMPLATES_DIR [CACHE_DIR]

(CACHE_DIR: where compiled templates are kept; none without it.)

It loads Jinja2 and the templates' environment at once, while opgen reads the specs, then
reads one request from stdin, a JSON document:

    {"plan": {package, ops, dtypes, attr_types, package_files, op_files, manifest, file_kinds}, "jobs": N}
        every file of a package: the checked model's facts (generator/rendering/template_data.cc)
        and the table of outputs (generator/rendering/outputs.cc), as plan.Plan takes them
    {"render": {"templates": [NAME, ...], "values": {KEY: TEXT}}}
        templates that read plain values (the skeletons of `opgen new` and `opgen init`)

and answers on stdout with records, each a header line `TAG INDEX LENGTH` and LENGTH bytes:
`P` the plan, a JSON object {"paths": [...], "workers": N}, sent before any file; `F` file
INDEX of the plan (or of the request), rendered; `E` an error that ends the run, a message
for opgen to print. A plan's files come from several processes when it has 200 files or
more, each writing whole records, so in no fixed order. Anything else the process prints
goes to stderr."""

import json
import os
import sys

# Below this many files, forking workers costs more than it saves.
FORK_THRESHOLD = 200


def missing_jinja2():
    return (f"Jinja2 is not installed for {sys.executable} (Python {sys.version.split()[0]}), the Python "
            f"that renders opgen's templates: install it there ({sys.executable} -m pip install jinja2), "
            "or set OPGEN_PYTHON to a Python that has it")


class Records:
    """Writes whole records to opgen (stdout), one process at a time where several share it."""

    def __init__(self, fd):
        self.fd = fd
        self.lock = None

    def send(self, tag, index, data):
        record = b'%s %d %d\n' % (tag, index, len(data)) + data
        if self.lock:
            self.lock.acquire()
        try:
            view = memoryview(record)
            while view:
                view = view[os.write(self.fd, view):]
        finally:
            if self.lock:
                self.lock.release()

    def error(self, message):
        self.send(b'E', 0, message.encode())
        return 1


def render_share(plan, records, first, step):
    """Renders and sends files first, first + step, ...; returns the exit status."""
    for index in range(first, len(plan), step):
        try:
            text = plan.render(index)
        except Exception as e:
            return records.error(f"template {plan.template(index)} failed for {plan.paths[index]}: "
                                 f"{type(e).__name__}: {e}")
        records.send(b'F', index, text.encode())
    return 0


def die_with_parent():
    """A worker ends with the renderer (which ends with opgen), so that a killed run leaves no
    process behind."""
    import ctypes
    import signal

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def render_all(plan, records, workers):
    """Renders every file of the plan, in `workers` processes: this one and forked ones, each
    taking every workers-th file (the files of one op lie together, so each process gets a
    share of every kind). Returns the exit status."""
    if workers > 1:
        import multiprocessing  # only here: importing it costs a small package's run 7 ms

        records.lock = multiprocessing.get_context('fork').Lock()
    parent, children = os.getpid(), []
    for share in range(1, workers):
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                die_with_parent()
                if os.getppid() == parent:
                    status = render_share(plan, records, share, workers)
            finally:
                # A worker never returns into the renderer's code; opgen no longer
                # reading (BrokenPipeError) is no news to it.
                os._exit(status)
        children.append(pid)
    status = render_share(plan, records, 0, workers)
    for pid in children:
        if os.waitpid(pid, 0)[1] != 0:
            status = 1
    return status


def answer(request, env, records):
    """Sends the records that answer `request`; returns the exit status."""
    if 'render' in request:
        values = request['render']['values']
        for index, name in enumerate(request['render']['templates']):
            try:
                text = env.get_template(name).render(**values)
            except Exception as e:
                return records.error(f"template {name} failed: {type(e).__name__}: {e}")
            records.send(b'F', index, text.encode())
        return 0
    from .plan import Plan

    try:
        plan = Plan(env, **request['plan'])
    except Exception as e:
        return records.error(f"cannot plan the files: {type(e).__name__}: {e}")
    workers = max(1, min(request['jobs'], len(plan))) if len(plan) >= FORK_THRESHOLD else 1
    records.send(b'P', 0, json.dumps({'paths': plan.paths, 'workers': workers}).encode())
    return render_all(plan, records, workers)


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit('usage: python -m opgen_render TEMPLATES_DIR [CACHE_DIR] (opgen runs it)')
    templates, cache = sys.argv[1], sys.argv[2] if len(sys.argv) == 3 else None
    # The folder opgen runs in (python -m puts it first on the path): a module there
    # (a project's json.py, say) must not stand in for the standard library's.
    if sys.path and sys.path[0] == os.getcwd():
        del sys.path[0]
    # The records own stdout; whatever else is printed goes to stderr.
    records = Records(os.dup(1))
    os.dup2(2, 1)
    try:
        from . import environment
    except ImportError as e:
        return records.error(missing_jinja2() if e.name and e.name.split('.')[0] in ('jinja2', 'markupsafe')
                             else f"cannot load opgen_render: {e}")
    env = environment.make_environment(templates, cache)
    try:
        return answer(json.load(sys.stdin.buffer), env, records)
    except BrokenPipeError:
        return 1  # opgen stopped reading, and says why itself


if __name__ == '__main__':
    sys.exit(main())
