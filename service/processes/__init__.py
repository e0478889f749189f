"""The supervisor and the serving processes it forks, replaces and drains."""
