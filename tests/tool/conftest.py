"""The time of each step of tests/tool (building the wheel, making virtualenvs, installing,
building and testing the projects), printed as a table at the end of the run."""

STEPS = []  # (step, seconds), appended by test_opgen_wheel.run


def pytest_terminal_summary(terminalreporter):
    if not STEPS:
        return
    width = max(len(step) for step, _ in STEPS)
    terminalreporter.section("tests/tool: time of each step")
    for step, seconds in STEPS:
        terminalreporter.write_line(f"{step:<{width}}  {seconds:7.1f} s")
    terminalreporter.write_line(f"{'all steps':<{width}}  {sum(s for _, s in STEPS):7.1f} s")
