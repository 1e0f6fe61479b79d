"""How spec text (docs, which a spec may fill with anything) reaches generated
code: only through these filters, never raw. Each keeps the text inside the
literal or comment it lands in, whatever it holds."""

import re
import unicodedata

# Printable ASCII but '"' and '\\': kept as they are, '?' included, so that a
# torch schema reads `Tensor? w`; a '?' after a '?' is escaped, so that no
# trigraph (`??/`) forms for a compiler that still reads them.
_CPP_PLAIN = re.compile(r'[ !#-\[\]-~]*')


def cpp_string(s):
    """A C++ string literal: printable ASCII kept, everything else octal."""
    if _CPP_PLAIN.fullmatch(s) and '??' not in s:
        return '"' + s + '"'
    out = ['"']
    previous = ''
    for b in s.encode('utf-8'):
        c = chr(b)
        if c in '"\\':
            out.append('\\' + c)
        elif 32 <= b < 127 and not (c == '?' and previous == '?'):
            out.append(c)
        else:
            out.append('\\%03o' % b)  # fixed width: never swallows a digit
        previous = c if out[-1] == c else ''
    out.append('"')
    return ''.join(out)


def py_string(s):
    """A Python string literal (repr escapes quotes, newlines, controls)."""
    return repr(str(s))


def comment_lines(s, marker):
    """Spec text as line comments: one comment per line (split wherever any
    language might break a line), control and bidi characters replaced, and
    trailing white space and backslashes dropped (GCC splices a line at a
    backslash followed by white space too), so text cannot leave the comment."""
    out = []
    for line in str(s).splitlines() or ['']:
        line = ''.join('?' if unicodedata.category(c) in ('Cc', 'Cf') else c for c in line)
        while True:
            stripped = line.rstrip().rstrip('\\')
            if stripped == line:
                break
            line = stripped
        out.append((marker + ' ' + line).rstrip())
    return '\n'.join(out)


def cpp_comment(s):
    return comment_lines(s, '//')


def py_comment(s):
    return comment_lines(s, '#')


# Markdown prose escapes only what would start HTML, with CommonMark's
# backslash escape, so that the raw file reads as the rendered page does:
# `R <= head_size` and `a & b` stay as they are, where entities (`&lt;=`)
# read badly in the raw file and show literally wherever a viewer renders a
# cell as text. In CommonMark (and GFM) a '<' starts raw HTML only when a
# letter, '/', '!' or '?' follows it (a tag, a closing tag, a comment or
# declaration, a processing instruction; HTML blocks start so too), and an
# autolink only when a letter (a scheme) or an e-mail address's local part up
# to its '@' follows it; such a '<' is written '\<', which renders as '<'.
# A '&' is escaped ('\&') only where it starts an entity or numeric reference,
# which would otherwise render as another character. '>' starts no HTML and
# stays. A run of backslashes before a '<', '&' or '|' is doubled (each pair
# renders as one backslash), so that text's own backslash can neither cancel
# the escape ('\\<script>' would be raw HTML) nor be lost. Markdown syntax
# other than HTML (emphasis, `code`) is left to the doc, as a feature; inside a
# code span the escape shows as written, as any escape does there.
_MD_LT_LIVE = re.compile(r"(\\*)<(?=[A-Za-z/!?]|[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]*@)")
_MD_AMP_LIVE = re.compile(r'(\\*)&(?=#[0-9]{1,7};|#[xX][0-9a-fA-F]{1,6};|[A-Za-z][A-Za-z0-9]*;)')
_MD_BEFORE_LT_AMP = re.compile(r'(\\+)(?=[<&])')


def md_text(s):
    """Spec text as Markdown prose: a '<' that could start HTML or an autolink,
    and a '&' that could start an entity, are backslash-escaped, so text cannot
    inject markup and reads as it is written (above)."""
    s = _MD_BEFORE_LT_AMP.sub(lambda m: m.group(1) * 2, str(s))
    s = _MD_LT_LIVE.sub(lambda m: m.group(1) + '\\<', s)
    return _MD_AMP_LIVE.sub(lambda m: m.group(1) + '\\&', s)


def _md_escape_pipes(s):
    """'|' as '\\|', which GFM splits no table cell at (in a code span too),
    with the backslashes before it doubled, so that none escapes the escape."""
    return re.sub(r'(\\*)\|', lambda m: m.group(1) * 2 + '\\|', s)


def md_cell(s):
    """Spec text in a Markdown table cell: one line, '|' escaped."""
    return _md_escape_pipes(' '.join(md_text(s).split()))


def md_code(s):
    """Text inside a `code span` (a table cell's too), where '<' and '&' are
    plain: no backticks, one line, '|' escaped. Code-like text (constraints,
    ranges, shapes) goes here, so that `R <= head_size` needs no escape."""
    return _md_escape_pipes(' '.join(str(s).replace('`', "'").split()))


def stamp_text(paths):
    """Spec paths as they appear in the generated-from stamp, a comment in
    every output: anything but plain path characters becomes '?', so a folder
    name cannot end the comment, and '--' (which would end a Markdown, that
    is HTML, comment) loses its second dash."""
    out = re.sub(r'[^a-zA-Z0-9._/, +@-]', '?', paths)
    while '--' in out:
        out = out.replace('--', '-?')
    return out


FILTERS = {
    'cpp_string': cpp_string,
    'py_string': py_string,
    'cpp_comment': cpp_comment,
    'py_comment': py_comment,
    'md_text': md_text,
    'md_cell': md_cell,
    'md_code': md_code,
}
