"""Chapter 04's agent tree, run with SGLang's frontend `fork` against a live SGLang server.

Runs inside the SGLang venv and imports nothing from servelab. The recorder of `sgl_agent.py`
(imported from beside this file) keeps every /generate request the frontend sends: its JSON body,
the server's answer, and when it was sent and answered.

The program: a system prompt and a task, a generated plan, then `fork` into one branch per branch
prompt, each generating a step, then each branch `fork`s again into its sub-branches, each
generating a result. Greedy, `max_tokens` per generation. The frontend runs every branch in a thread
of its own, so branches run in parallel; a `fork` into more than one branch of a state with text first
sends that text as a request with `max_new_tokens` 0 (`StreamExecutor.fork` and
`RuntimeEndpoint.commit_lazy_operations` in `sglang/lang/`), so the branches find it cached. `fork`
checks for text (`str(self.text_)`) before it waits for the state's worker thread: if the thread has
written any, the commit is queued behind the operations still pending and sends all of it, but a fork
of a state whose thread has written no text yet sends no commit. The program reads the plan before it
forks, which waits for it.

Usage: python sgl_agent_tree.py SERVER_URL < SPEC.json, SPEC with system, task, branches (a list of
texts), sub_branches (one list of texts per branch), max_tokens. Prints one JSON object: plan,
steps, results and requests (in the order sent).
"""

from __future__ import annotations

import json
import sys

import sglang as sgl
from sgl_agent import REQUESTS  # importing it installs the recorder


@sgl.function
def agent_tree(s, system, task, branches, sub_branches, max_tokens):
    s += sgl.system(system)
    s += sgl.user(task)
    s += sgl.assistant(sgl.gen("plan", max_tokens=max_tokens, temperature=0))
    s["plan"]  # the agent reads its plan before it forks (this waits for the generation)
    forks = s.fork(len(branches))  # commits the text so far, then one state per branch
    for fork, step in zip(forks, branches, strict=True):
        fork += sgl.user(step)
        fork += sgl.assistant(sgl.gen("step", max_tokens=max_tokens, temperature=0))
    leaves = []
    for fork, steps in zip(forks, sub_branches, strict=True):
        subs = fork.fork(len(steps))  # waits for this branch only; the others run on
        for sub, step in zip(subs, steps, strict=True):
            sub += sgl.user(step)
            sub += sgl.assistant(sgl.gen("result", max_tokens=max_tokens, temperature=0))
        leaves.append(subs)
    s["steps"] = [fork["step"] for fork in forks]
    s["results"] = [[sub["result"] for sub in subs] for subs in leaves]


def main(url: str, spec: dict) -> dict:
    sgl.set_default_backend(sgl.RuntimeEndpoint(url, chat_template_name="chatml"))
    state = agent_tree.run(**spec)
    return {"plan": state["plan"], "steps": state["steps"], "results": state["results"],
            "requests": sorted(REQUESTS, key=lambda r: r["order"])}


if __name__ == "__main__":
    json.dump(main(sys.argv[1], json.load(sys.stdin)), sys.stdout)
