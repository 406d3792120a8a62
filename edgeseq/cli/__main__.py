from edgeseq.cli import main

main()
