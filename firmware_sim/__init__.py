"""Microcontroller simulator: target profiles, memory planning and cost (`plan`), integer-only
execution of int8 recurrent step graphs (`intsim`, its arithmetic `intmath` and checks `intcheck`,
`simulate`) and C99 emission (`cemit`)."""
