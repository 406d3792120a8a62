"""`edgeseq devices`: the fleet's credentials (add, rotate, remove, list) that `edgeseq serve`'s
server admits, each device allowed to publish its own readings only."""

from __future__ import annotations

import click

from edgeseq.cli._common import _errors
from edgeseq.errors import printable

FLEET_HELP = "Folder of the fleet's credentials (the one `edgeseq serve --fleet` reads)."


@click.group()
def devices():
    """Devices allowed to send readings to `edgeseq serve`.

    Each device gets a user (its id) and a random password; it may publish only to
    edgeseq.in.<id> (MQTT edgeseq/in/<id>) and subscribe only to edgeseq.out.<id>. A running
    `edgeseq serve` with the same --fleet picks changes up within a few seconds.

    \b
      edgeseq devices add pump-7                 # prints its password, once
      edgeseq devices add pump-7 --rotate        # a new password; the old one stops working
      edgeseq devices remove pump-7
      edgeseq devices list
    """


@devices.command()
@click.argument("device")
@click.option("--fleet", default="runs/fleet", show_default=True, type=click.Path(file_okay=False), help=FLEET_HELP)
@click.option("--rotate", is_flag=True, help="Give a device that exists a new password.")
@_errors
def add(device, fleet, rotate):
    """Add DEVICE (letters, digits, - and _; not _ alone, not starting with -) and print its credentials, the only
    time they are shown."""
    from edgeseq.gateway.fleet import Fleet
    password = Fleet(fleet).add_device(device, rotate=rotate)
    click.echo(f"device {device} {'has a new password' if rotate else 'added'} in {printable(fleet)}; store these on the device "
               "now, they are not shown again:", err=True)
    click.echo(f"user: {device}\npassword: {password}\npublish: edgeseq.in.{device} (MQTT edgeseq/in/{device})\n"
               f"predictions: edgeseq.out.{device} (MQTT edgeseq/out/{device}, QoS 0)")


@devices.command()
@click.argument("device")
@click.option("--fleet", default="runs/fleet", show_default=True, type=click.Path(file_okay=False), help=FLEET_HELP)
@_errors
def remove(device, fleet):
    """Remove DEVICE: the server refuses it from its next reload on."""
    from edgeseq.gateway.fleet import Fleet
    Fleet(fleet).remove_device(device)
    click.echo(f"device {device} removed from {printable(fleet)}", err=True)


@devices.command(name="list")
@click.option("--fleet", default="runs/fleet", show_default=True, type=click.Path(file_okay=False), help=FLEET_HELP)
@_errors
def list_cmd(fleet):
    """Print each device and when it was added (never a password)."""
    from pathlib import Path

    from edgeseq.errors import UsageError
    from edgeseq.gateway.fleet import Fleet
    if not Path(fleet).is_dir():
        raise UsageError(f"no fleet at {printable(fleet)} (no such folder): give the folder `edgeseq serve --fleet` "
                         "reads, or add a device there first (edgeseq devices add NAME --fleet FOLDER)")
    devs = Fleet(fleet).devices()
    for d, v in sorted(devs.items()):
        click.echo(f"{printable(d)}\tadded {printable(v.get('added', '?'))}")
    if not devs:
        click.echo(f"no devices in {printable(fleet)}: edgeseq devices add NAME", err=True)
