"""What the tests share: fake fleets, hosts, servers and the recorded fleets they replay."""
