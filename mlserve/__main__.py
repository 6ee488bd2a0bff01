from mlserve.cli import main

main()
