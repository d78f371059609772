"""`python -m agent_rl.report WORKDIR`: learning-curve PNG and markdown summary of a run."""
import sys

from agent_rl.eval.report import write_report


def main(argv: list[str]) -> None:
  if len(argv) != 2:
    raise SystemExit("usage: python -m agent_rl.report WORKDIR")
  png, md = write_report(argv[1])
  print(open(md).read())
  print(f"wrote {png} and {md}")


if __name__ == "__main__":
  main(sys.argv)
