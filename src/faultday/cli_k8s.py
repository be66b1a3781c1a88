"""``faultday k8s plan|rbac|manifests|jobs``: the Kubernetes side from a shell.

``faultday.cli`` adds it with ``register(app)`` (the ``k8s`` sub-command) and maps
the errors these commands raise to exit codes.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
import yaml
from rich.console import Console

from faultday.core.ledger import Ledger
from faultday.core.profile import load_profile
from faultday.scenario.loader import load_scenario

if TYPE_CHECKING:
    from faultday.cluster.kubernetes import KubernetesStack

app = typer.Typer(
    help="Kubernetes: dry-run plans, RBAC, manifests, load Jobs.", no_args_is_help=True
)
out = Console(soft_wrap=True, highlight=False)
err = Console(stderr=True, soft_wrap=True, highlight=False)

ProfileOpt = Annotated[str, typer.Option("--profile", "-p", help="Stack profile name or path.")]
ConfigOpt = Annotated[
    Path | None, typer.Option("--config", "-c", help="A KubernetesTarget file (driver config).")
]
NamespaceOpt = Annotated[
    str | None, typer.Option("--namespace", "-n", help="Overrides the config.")
]


def register(app_: typer.Typer) -> None:
    """Add ``faultday k8s …`` to the main CLI."""
    app_.add_typer(app, name="k8s")


def _stack(profile: str, config: Path | None, namespace: str | None) -> KubernetesStack:
    # Imported here for start-up time: the kubernetes client is slow to import.
    from faultday.cluster.config import KubernetesConfig, config_with, load_config  # noqa: PLC0415
    from faultday.cluster.kubernetes import KubernetesStack  # noqa: PLC0415

    p = load_profile(profile, base_dir=Path.cwd())
    cfg = load_config(config) if config else KubernetesConfig()
    cfg = config_with(cfg, namespace=namespace)
    run_dir = Path(".faultday") / "k8s" / p.name
    return KubernetesStack(p, run_dir=run_dir, ledger=Ledger.in_dir(run_dir), config=cfg)


@app.command()
def plan(
    profile: ProfileOpt = "local",
    config: ConfigOpt = None,
    namespace: NamespaceOpt = None,
    scenario: Annotated[
        Path | None, typer.Option("--scenario", "-s", help="Also list what its faults touch.")
    ] = None,
    live: Annotated[bool, typer.Option(help="Resolve selectors against the cluster.")] = False,
) -> None:
    """Print every object `up`, the faults and `down` would touch; change nothing."""
    # Optional dependency: the kubernetes client (faultday[k8s]) loads only for k8s commands.
    from faultday.cluster.plan import plan as make_plan  # noqa: PLC0415

    stack = _stack(profile, config, namespace)
    sc = load_scenario(scenario).scenario if scenario else None
    touches = make_plan(stack, scenario=sc, live=live)
    out.print(
        f"# dry run: profile {stack.profile.name}, namespace {stack.namespace}, "
        f"mode {stack.config.mode}, label app.kubernetes.io/part-of={stack.part_of}"
    )
    for t in touches:
        out.print(str(t))


@app.command()
def rbac(
    profile: ProfileOpt = "local",
    config: ConfigOpt = None,
    namespace: NamespaceOpt = None,
    node_access: Annotated[bool, typer.Option(help="ClusterRole for node_gpu_loss.")] = True,
) -> None:
    """Print the ServiceAccount, Role and RoleBinding the harness needs (kubectl apply -f -)."""
    # Optional dependency: the kubernetes client (faultday[k8s]) loads only for k8s commands.
    from faultday.cluster.rbac import render_rbac  # noqa: PLC0415

    stack = _stack(profile, config, namespace)
    docs = render_rbac(namespace=stack.namespace, part_of=stack.part_of, node_access=node_access)
    out.print(yaml.safe_dump_all(docs, sort_keys=False), end="")


@app.command()
def manifests(
    profile: ProfileOpt = "local", config: ConfigOpt = None, namespace: NamespaceOpt = None
) -> None:
    """Print the manifests `up` applies (the renderer's, placed in the namespace)."""
    stack = _stack(profile, config, namespace)
    out.print(yaml.safe_dump_all(stack.manifests(), sort_keys=False), end="")
