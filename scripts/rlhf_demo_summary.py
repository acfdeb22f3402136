"""Print the RLHF quick start's figures from its metrics files: the reward model's
held-out pairwise accuracy, and PPO's mean reward over the first and last 5 steps with
the largest and last KL (summed over a response, nats).

Usage: ``python scripts/rlhf_demo_summary.py --reward-run runs/rlhf_reward_tiny --ppo-run runs/ppo_tiny``
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def records(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reward-run", type=Path, default=Path("runs/rlhf_reward_tiny"))
    parser.add_argument("--ppo-run", type=Path, default=Path("runs/ppo_tiny"))
    args = parser.parse_args()
    evals = [r for r in records(args.reward_run) if "val_accuracy" in r]
    if evals:
        last = evals[-1]
        print(
            f"reward model: held-out pairwise accuracy {last['val_accuracy']:.3f} at step "
            f"{last['step']} ({int(last['val_weight'])} pairs)"
        )
    steps = [r for r in records(args.ppo_run) if "reward" in r]
    if len(steps) < 10:
        print(f"ppo: {len(steps)} steps logged; need 10 for the figures")
        return 1
    start = sum(r["reward"] for r in steps[:5]) / 5
    end = sum(r["reward"] for r in steps[-5:]) / 5
    kls = [r["kl"] for r in steps]
    print(
        f"ppo: mean reward {start:.3f} (steps 1-5) -> {end:.3f} (steps "
        f"{steps[-5]['step']}-{steps[-1]['step']}); KL to the SFT policy max {max(kls):.3f}, "
        f"last {kls[-1]:.3f} nats per response"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
