"""Every file a run renders: its template, where it goes, and its context
(built once, before render workers fork, so that each render is all that is
left)."""

import gc

from . import context
from .escaping import stamp_text


class Plan:
    """`package_files`, each op's `op_files` and `manifest` are (template,
    path, kind) triples (generator/rendering/outputs.cc); the manifest, of every other
    file, comes last. The package's templates see every file by kind
    (`files`), for the build, and the kinds as (name, what) pairs
    (`file_kinds`)."""

    def __init__(self, env, package, ops, dtypes, attr_types, package_files, op_files, manifest, file_kinds):
        pkg = context.package_data(package, dtypes)
        op_contexts = [context.op_data(op, package, dtypes, attr_types) for op in ops]
        self.paths, self._templates, self._contexts = [], [], []
        loaded = {}

        def add(template, path, sources, ctx):
            ctx['generated_from'] = stamp_text(sources)
            ctx['template_name'] = 'templates/' + template
            if template not in loaded:
                loaded[template] = env.get_template(template)
            self.paths.append(path)
            self._templates.append(template)
            self._contexts.append((loaded[template], ctx))

        by_kind = {}
        for _, path, kind in list(package_files) + [f for files in op_files for f in files] + [manifest]:
            by_kind.setdefault(kind, []).append(path)
        # A package file names no op's spec, so that adding an op changes
        # only the lines of that op in it.
        all_sources = package['spec_path'] + ' and every op spec'
        for template, path, _ in package_files:
            add(template, path, all_sources,
                {'package': pkg, 'ops': op_contexts, 'files': by_kind, 'file_kinds': file_kinds})
        for op, op_ctx, files in zip(ops, op_contexts, op_files):
            for template, path, _ in files:
                add(template, path, package['spec_path'] + ', ' + op['spec_path'], {'package': pkg, 'op': op_ctx})
        add(manifest[0], manifest[1], all_sources, {'package': pkg, 'files': sorted(self.paths)})
        # The plan lives until the process ends: frozen, it is left out of every
        # collection, which then walks only what renders leave behind (each
        # render's context and macros form cycles), and forked workers do not
        # copy its pages for the collector's sake.
        gc.collect()
        gc.freeze()

    def __len__(self):
        return len(self.paths)

    def template(self, index):
        return self._templates[index]

    def render(self, index):
        template, ctx = self._contexts[index]
        return template.render(**ctx)
