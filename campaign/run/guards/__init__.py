"""What keeps a night honest, checked before and during it (`campaign.run`'s guards).

    `lanelock`   one campaign per lane at a time
    `cleanup`    leftovers of runs no longer alive: `spec-ab clean`, and the refusal to run
    `portguard`  the port of a server spec-ab starts is that server's, or nothing is measured
"""
