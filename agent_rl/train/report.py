"""`python -m agent_rl.train.report WORKDIR`: learning-curve PNG, markdown summary and sampled
episodes of a run (WORKDIR may be gs://...)."""
import sys

from etils import epath

from agent_rl.eval.report import write_report


def main(argv: list[str]) -> None:
  if len(argv) != 2:
    raise SystemExit("usage: python -m agent_rl.train.report WORKDIR")
  png, md = write_report(argv[1])
  print(epath.Path(md).read_text())
  print(f"wrote {png} and {md}")


if __name__ == "__main__":
  main(sys.argv)
